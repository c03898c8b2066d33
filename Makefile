# Shortcuts for the scripts (the scripts are the source of truth).
.PHONY: run test bench deb

run:
	./scripts/run-default.sh

test:
	./scripts/test.sh

# heft beside nginx, HAProxy and Caddy (BENCHMARKS.md); ARGS="--rounds 7" etc.
bench:
	./bench/proxy $(ARGS)

# heft_VERSION_ARCH.deb in build/ (docs/install.md): heft and its manual page
# built in Release, then packaging/build-deb.sh.
deb:
	./scripts/install-deps.sh
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build --target heft heft_manual
	./packaging/build-deb.sh build
