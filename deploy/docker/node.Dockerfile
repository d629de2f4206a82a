# gpuvisor-node image: the device plugin and the interposer it installs on
# the host.  Build from the repository root (docs/install.md, "Images"):
#   docker build -f deploy/docker/node.Dockerfile -t gpuvisor/gpuvisor-node .
#
# Base pinned by digest: debian:bookworm-slim as of Debian 12.4.  The digest
# is the one Docker Hub returned for debian:bookworm-slim in public
# `docker pull` logs ("Digest: sha256:7802...d603"), and public Dockerfiles
# pin the same digest as debian:12.4-slim; it was not pulled from here (no
# network).  It is an old point release: the stages below install current
# bookworm packages, but the base layer's own libraries are those of 12.4.
# Refresh it for a release with
#   docker buildx imagetools inspect debian:bookworm-slim
# and pass another with --build-arg BASE=debian@sha256:<digest>.
ARG BASE=debian:bookworm-slim@sha256:7802002798b0e351323ed2357ae6dc5a8c4d0a05a57e7f4d8f97136151d3d603

FROM ${BASE} AS build
# Package lists come from the one list (scripts/debian-packages.txt).
COPY scripts/debian-packages.txt scripts/packages.sh /tmp/pk/
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(/tmp/pk/packages.sh build) \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" build/bin/gpuvisor-node build/lib/libgpuvisor.so \
 && strip build/bin/gpuvisor-node

FROM ${BASE}
COPY scripts/debian-packages.txt scripts/packages.sh /tmp/pk/
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(/tmp/pk/packages.sh runtime) \
 && rm -rf /var/lib/apt/lists/* /tmp/pk
COPY --from=build /src/build/bin/gpuvisor-node /usr/local/bin/gpuvisor-node
# Copied to the host by the DaemonSet's init container.
COPY --from=build /src/build/lib/libgpuvisor.so /usr/local/gpuvisor/lib/libgpuvisor.so
# Runs as root: the kubelet's device-plugin socket directory, the host state
# directory and the interposer install on the host need it (docs/install.md).
ENTRYPOINT ["/usr/local/bin/gpuvisor-node"]
