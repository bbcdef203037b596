# systemd's `systemd-analyze`, for the test that verifies the units `upcheck envoy --units`
# writes (cli/tests/commands/units.rs): Debian's `systemd` package. Included from the root
# Makefile.
#
#   make systemd-analyze   install it when missing (apt-get update first)
#
# `systemd-analyze verify` reads unit files offline: no systemd needs to run (a container has
# none), and nothing is started. The test reads the binary from UPCHECK_SYSTEMD_ANALYZE and fails
# (not skips) without it.

SYSTEMD_ANALYZE ?= /usr/bin/systemd-analyze
export UPCHECK_SYSTEMD_ANALYZE = $(SYSTEMD_ANALYZE)

.PHONY: systemd-analyze

systemd-analyze:
	@test -x $(SYSTEMD_ANALYZE) || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null; }
	@$(SYSTEMD_ANALYZE) --version | head -n1
