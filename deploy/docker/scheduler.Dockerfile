# gpuvisor-scheduler image (extender + admission webhook).
# Build from the repository root:
#   docker build -f deploy/docker/scheduler.Dockerfile -t gpuvisor/gpuvisor-scheduler .
FROM debian:bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential pkg-config \
      libjansson-dev libcurl4-openssl-dev libmicrohttpd-dev libgnutls28-dev libyaml-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" build/bin/gpuvisor-scheduler \
 && strip build/bin/gpuvisor-scheduler

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
      libjansson4 libcurl4 libmicrohttpd12 libgnutls30 libyaml-0-2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/gpuvisor-scheduler /usr/local/bin/gpuvisor-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpuvisor-scheduler"]
