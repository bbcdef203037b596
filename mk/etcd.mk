# etcd for the fleet's end-to-end tests and the host's fleet benchmark: Debian's etcd-server
# (3.4), installed when missing, and the openssl command, with which the TLS tests make their
# certificates.
# Included from the root Makefile; `make e2e` and `make host-test` depend on it, and it exports
# its path.
#
#   make etcd     install etcd-server and openssl when missing, check and print etcd's version
#
# ETCD is the binary's path; the tests read it from UPCHECK_ETCD and fail (not skip) without it.

ETCD ?= /usr/bin/etcd
export UPCHECK_ETCD = $(ETCD)

.PHONY: etcd

etcd:
	@test -x $(ETCD) || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null; }
	@command -v openssl >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null; }
	@$(ETCD) --version | grep -q "etcd Version: 3\." || { echo "$(ETCD) is not etcd 3" >&2; exit 1; }
	@echo "etcd: $$($(ETCD) --version | head -n1) ($(ETCD))"
