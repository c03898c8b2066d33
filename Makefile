# Shortcuts for the scripts (the scripts are the source of truth).
.PHONY: run test bench

run:
	./scripts/run-default.sh

test:
	./scripts/test.sh

# heft beside nginx, HAProxy and Caddy (BENCHMARKS.md); ARGS="--rounds 7" etc.
bench:
	./bench/proxy $(ARGS)
