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
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tidemark \
 && install -m 0755 target/release/tidemark /usr/local/bin/tidemark

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
