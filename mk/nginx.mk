# Debian's NGINX, for checking what `upcheck nginx` writes. Included from the root Makefile after
# mk/envoy.mk, whose `e2e` target needs it; also usable alone: `make -f mk/nginx.mk nginx`.
#
#   make nginx   install Debian's nginx when missing (apt-get update first), print its version
#
# Stock NGINX lacks Kong's ngx_wasm_module, which the project does not build: the CLI's tests
# (cli/tests/commands/nginx_validate.rs) run `nginx -t` on the written file with the module's
# directives left out, and read the binary's path from UPCHECK_NGINX. Installing the package
# starts no server that matters here: the tests only run `nginx -t` with a configuration of
# their own.

NGINX ?= /usr/sbin/nginx
export UPCHECK_NGINX = $(NGINX)

.PHONY: nginx

nginx:
	@test -x $(NGINX) || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; }
	@$(NGINX) -v
