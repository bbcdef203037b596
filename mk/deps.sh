#!/usr/bin/env bash
# Installs the Debian packages the tests need that are missing, with one `apt-get update` (dpkg
# has one lock, and each update costs seconds): `mk/deps.sh PACKAGE:COMMAND[:lean] ...` installs
# PACKAGE when COMMAND is not on the PATH (or, given as a path, not executable, or for a shared
# object `.so`, not there); `lean` installs it without its recommended packages. The targets of mk/*.mk that need one package keep their
# own check; `make test` calls this once, beside the first build.
set -euo pipefail
full=() lean=()
for spec in "$@"; do
    IFS=: read -r package command how <<<"$spec"
    if [[ $command == *.so ]]; then [[ -f $command ]] && continue
    elif [[ $command == /* ]]; then [[ -x $command ]] && continue
    else command -v "$command" >/dev/null && continue
    fi
    if [[ $how == lean ]]; then lean+=("$package"); else full+=("$package"); fi
done
(( ${#full[@]} + ${#lean[@]} )) || exit 0
echo "apt-get install ${full[*]} ${lean[*]}"
apt-get update -qq
export DEBIAN_FRONTEND=noninteractive
(( ${#full[@]} )) && apt-get install -y -qq "${full[@]}" >/dev/null
(( ${#lean[@]} )) && apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
exit 0
