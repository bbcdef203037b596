# Prometheus for the operating tests: Debian's `prometheus` package (2.42), which brings
# `promtool`. Included from the root Makefile; also usable alone: `make -f mk/prometheus.mk rules`.
#
#   make prometheus   install it when missing (apt-get update first)
#   make rules        `promtool check rules` and `promtool test rules` on config/prometheus/
#
# The e2e tests that scrape a real Envoy (cli/tests/commands/prometheus.rs) read the binary from
# UPCHECK_PROMETHEUS and fail (not skip) without it. Debian's package also starts a Prometheus
# service where systemd runs; the tests never use it, they start their own on loopback.

PROMETHEUS ?= /usr/bin/prometheus
PROMTOOL ?= /usr/bin/promtool
export UPCHECK_PROMETHEUS = $(PROMETHEUS)

.PHONY: prometheus rules

prometheus:
	@test -x $(PROMETHEUS) && test -x $(PROMTOOL) || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@$(PROMETHEUS) --version 2>&1 | head -n1

rules: prometheus
	$(PROMTOOL) check rules config/prometheus/alerts.yml
	$(PROMTOOL) test rules config/prometheus/tests/*.yml
