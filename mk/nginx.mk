# Debian's NGINX, for checking what `upcheck nginx` writes. Included from the root Makefile after
# mk/envoy.mk, whose `e2e` target needs it; also usable alone: `make -f mk/nginx.mk nginx`.
#
#   make nginx   install Debian's nginx when missing (apt-get update first), print its version
#
# Stock NGINX lacks Kong's ngx_wasm_module, which the project does not build: the CLI's tests
# (cli/tests/commands/nginx_validate.rs) run `nginx -t` on the written file with the module's
# directives left out, and read the binary's path from UPCHECK_NGINX. A dynamic module Debian
# ships (the stream module, UPCHECK_NGINX_MODULE) stands in for ngx_wasm_module's, so that
# `nginx -t` loads what `upcheck nginx --module` writes. Installing the packages starts no server
# that matters here: the tests only run `nginx -t` with a configuration of their own.

NGINX ?= /usr/sbin/nginx
NGINX_MODULE ?= /usr/lib/nginx/modules/ngx_stream_module.so
export UPCHECK_NGINX = $(NGINX)
export UPCHECK_NGINX_MODULE = $(NGINX_MODULE)

.PHONY: nginx

nginx:
	@test -x $(NGINX) -a -f $(NGINX_MODULE) || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx libnginx-mod-stream >/dev/null; }
	@$(NGINX) -v
