# gpuvisor-node image: the device plugin and the interposer it installs on
# the host.  For users with Docker; `make images` builds the same image
# without it.  Both run scripts/build-image.sh, the one place that says what
# the image contains (Debian's Essential set + the "runtime" group of
# scripts/debian-packages.txt via mmdebstrap, the binaries, licences), so the
# two give the same files (docs/install.md, "Images").  From the repository
# root:
#   docker build -f deploy/docker/node.Dockerfile \
#     --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) \
#     --build-arg GV_REVISION=$(git rev-parse HEAD) -t gpuvisor-node:0.1.0 .
#
# The base only hosts the build: the image itself is FROM scratch.  It is
# pinned by digest: debian:bookworm-slim as of Debian 12.4, the digest Docker
# Hub returned in public `docker pull` logs (not pulled from here: no
# network).  Refresh it with `docker buildx imagetools inspect
# debian:bookworm-slim` and pass --build-arg BASE=debian@sha256:<digest>.
# The packages in the image come from the archive at build time, not from
# this base.
ARG BASE=debian:bookworm-slim@sha256:7802002798b0e351323ed2357ae6dc5a8c4d0a05a57e7f4d8f97136151d3d603

FROM ${BASE} AS build
# Package lists come from the one list (scripts/debian-packages.txt).
COPY scripts/debian-packages.txt scripts/packages.sh /tmp/pk/
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(/tmp/pk/packages.sh build image) \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Fixes every timestamp in the image (reproducible builds).
ARG SOURCE_DATE_EPOCH
# The commit recorded in /usr/share/doc/gpuvisor/VERSION (.dockerignore
# leaves .git out of the context).
ARG GV_REVISION
RUN make -j"$(nproc)" build/bin/gpuvisor-node build/lib/libgpuvisor.so \
 && scripts/build-image.sh rootfs node build /rootfs.tar \
 && mkdir /rootfs && tar -C /rootfs --numeric-owner -xpf /rootfs.tar

FROM scratch
COPY --from=build /rootfs/ /
# As `scripts/build-image.sh config node` prints (tests/deploy/test_images.sh).
# Root without capabilities: the kubelet's device-plugin socket directory,
# the host state directory and the interposer install on the host need it
# (docs/install.md).
USER 0:0
ENTRYPOINT ["/usr/local/bin/gpuvisor-node"]
