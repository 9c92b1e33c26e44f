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
# Stripped binary, debug info split off. The release profile keeps line tables
# (`debug = "line-tables-only"` in Cargo.toml), so target/release/tidemark is ~509 MB, nearly
# all of it DWARF. The image gets a copy without debug sections and without a symbol table
# (`objcopy --strip-all`, what `strip`/`install -s` do; ~25 MB). The debug sections and the
# symbol table go to a separate file that stays in this stage, at
# /usr/lib/debug/usr/local/bin/tidemark.debug. The binary's `.gnu_debuglink` section names that
# file (with its CRC), and gdb looks it up there by default. The file in the target dir is read
# and never changed, so the cached build stays valid. To get the debug file out:
#   docker build --target debug --output type=local,dest=./tidemark-debug .
# then `addr2line -f -C -e ./tidemark-debug/tidemark.debug ADDR`, or put it next to a copy of
# the binary for gdb. Cost: a panic backtrace printed by the image's binary has no function
# names (there is no symbol table); `RUST_BACKTRACE=full` prints the addresses, which
# addr2line resolves with that file once the load address is subtracted (the binary is PIE).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tidemark \
 && mkdir -p /usr/lib/debug/usr/local/bin \
 && objcopy --only-keep-debug target/release/tidemark /usr/lib/debug/usr/local/bin/tidemark.debug \
 && objcopy --strip-all --add-gnu-debuglink=/usr/lib/debug/usr/local/bin/tidemark.debug \
      target/release/tidemark /usr/local/bin/tidemark \
 && chmod 0755 /usr/local/bin/tidemark

# ---- debug info (optional, never in the image) ----------------------------------------
# `docker build --target debug --output type=local,dest=DIR .` writes DIR/tidemark.debug.
# A plain `docker build` builds the last stage (runtime) and skips this one.
FROM scratch AS debug
COPY --from=builder /usr/lib/debug/usr/local/bin/tidemark.debug /tidemark.debug

# ---- runtime -------------------------------------------------------------------------
FROM debian:bookworm-slim
# ca-certificates: TLS to Kafka and to webhook endpoints; libssl3: librdkafka's OpenSSL.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 tidemark \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/tidemark \
      --no-create-home --shell /usr/sbin/nologin tidemark \
 && mkdir -p /var/lib/tidemark /etc/tidemark \
 && chown 10001:10001 /var/lib/tidemark
COPY --from=builder /usr/local/bin/tidemark /usr/local/bin/tidemark
USER 10001:10001
WORKDIR /var/lib/tidemark
# HTTP: /metrics, /healthz, /readyz.
EXPOSE 9090
ENTRYPOINT ["tidemark"]
CMD ["--help"]
