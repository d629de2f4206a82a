# gpuvisor-node image: the device plugin and the interposer it installs on
# the host.  Build from the repository root:
#   docker build -f deploy/docker/node.Dockerfile -t gpuvisor/gpuvisor-node .
FROM debian:bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential pkg-config \
      libjansson-dev libcurl4-openssl-dev libnghttp2-dev libprotobuf-c-dev \
      protobuf-c-compiler libyaml-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" build/bin/gpuvisor-node build/lib/libgpuvisor.so \
 && strip build/bin/gpuvisor-node

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
      libjansson4 libcurl4 libnghttp2-14 libprotobuf-c1 libyaml-0-2 \
      pci.ids \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/gpuvisor-node /usr/local/bin/gpuvisor-node
# Copied to the host by the DaemonSet's init container.
COPY --from=build /src/build/lib/libgpuvisor.so /usr/local/gpuvisor/lib/libgpuvisor.so
ENTRYPOINT ["/usr/local/bin/gpuvisor-node"]
