# syntax=docker/dockerfile:1
# tidemark container image: `docker build -t tidemark .` at the repository root.
# The Helm chart (helm/tidemark) runs it as UID 10001 with a read-only root filesystem,
# the RocksDB state on a volume at /var/lib/tidemark and an emptyDir at /tmp.

# ---- build ---------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
# libclang-dev: bindgen for RocksDB; g++/cmake/make: RocksDB and librdkafka from source;
# libssl-dev, zlib1g-dev, pkg-config: librdkafka's TLS and compression.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libclang-dev clang g++ make cmake pkg-config libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# BuildKit cache mounts keep the registry and the (long: RocksDB + librdkafka) build
# between image builds; the binary is copied out of the cached target dir in the same step.
#
# The release profile (Cargo.toml) builds without DWARF and keeps the symbol table:
# target/release/tidemark is ~30 MB. The image gets a copy without the symbol table too
# (`objcopy --strip-all`, what `strip`/`install -s` do; ~25 MB); the symbols go to a separate
# file that stays in this stage, at /usr/lib/debug/usr/local/bin/tidemark.debug, which the
# binary's `.gnu_debuglink` section names (with its CRC), so gdb finds it there by default.
# The file in the target dir is read and never changed, so the cached build stays valid. To
# get the symbol file out:
#   docker build --target debug --output type=local,dest=./tidemark-debug .
# then `addr2line -f -C -e ./tidemark-debug/tidemark.debug ADDR`. Cost: a panic backtrace
# printed by the image's binary has no function names; `RUST_BACKTRACE=full` prints the
# addresses, which that file resolves once the load address is subtracted (the binary is PIE).
# libz is the one shared library the binary needs (ldd) that the runtime base may lack; it is
# copied beside the base's own libraries.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tidemark \
 && mkdir -p /usr/lib/debug/usr/local/bin /out/usr/local/bin \
 && objcopy --only-keep-debug target/release/tidemark /usr/lib/debug/usr/local/bin/tidemark.debug \
 && objcopy --strip-all --add-gnu-debuglink=/usr/lib/debug/usr/local/bin/tidemark.debug \
      target/release/tidemark /out/usr/local/bin/tidemark \
 && chmod 0755 /out/usr/local/bin/tidemark \
 && mkdir -p "/out/usr/lib/$(gcc -dumpmachine)" \
 && cp -L "/usr/lib/$(gcc -dumpmachine)/libz.so.1" "/out/usr/lib/$(gcc -dumpmachine)/" \
 && mkdir -p /out/var/lib/tidemark /out/etc/tidemark

# ---- debug info (optional, never in the image) ----------------------------------------
# `docker build --target debug --output type=local,dest=DIR .` writes DIR/tidemark.debug.
# A plain `docker build` builds the last stage (runtime) and skips this one.
FROM scratch AS debug
COPY --from=builder /usr/lib/debug/usr/local/bin/tidemark.debug /tidemark.debug

# ---- runtime -------------------------------------------------------------------------
# distroless/cc: glibc, libstdc++, libgcc, libssl3 and the CA certificates (TLS to Kafka and
# to webhook endpoints, `trust = "system"`), no shell and no package manager. Its ~23 MB plus
# the ~25 MB binary keep the image under 60 MB; debian:bookworm-slim alone is ~75 MB.
FROM gcr.io/distroless/cc-debian12
COPY --from=builder /out/ /
# The state volume's mount point, owned by the chart's UID (10001; no passwd entry needed).
COPY --from=builder --chown=10001:10001 /out/var/lib/tidemark /var/lib/tidemark
USER 10001:10001
WORKDIR /var/lib/tidemark
# HTTP: /metrics, /healthz, /readyz.
EXPOSE 9090
ENTRYPOINT ["tidemark"]
CMD ["--help"]
