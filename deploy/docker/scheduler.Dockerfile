# gpuvisor-scheduler image (extender + admission webhook).  For users with
# Docker; `make images` builds the same image without it: both run
# scripts/build-image.sh (see node.Dockerfile).  From the repository root:
#   docker build -f deploy/docker/scheduler.Dockerfile \
#     --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) \
#     --build-arg GV_REVISION=$(git rev-parse HEAD) -t gpuvisor-scheduler:0.1.0 .
#
# Base pinned by digest (build stage only); see node.Dockerfile for where the
# digest comes from (not verified against the registry here) and how to
# refresh it.
ARG BASE=debian:bookworm-slim@sha256:7802002798b0e351323ed2357ae6dc5a8c4d0a05a57e7f4d8f97136151d3d603

FROM ${BASE} AS build
COPY scripts/debian-packages.txt scripts/packages.sh /tmp/pk/
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(/tmp/pk/packages.sh build image) \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG SOURCE_DATE_EPOCH
# The commit recorded in /usr/share/doc/gpuvisor/VERSION (.dockerignore
# leaves .git out of the context).
ARG GV_REVISION
RUN make -j"$(nproc)" build/bin/gpuvisor-scheduler \
 && scripts/build-image.sh rootfs scheduler build /rootfs.tar \
 && mkdir /rootfs && tar -C /rootfs --numeric-owner -xpf /rootfs.tar

FROM scratch
COPY --from=build /rootfs/ /
# As `scripts/build-image.sh config scheduler` prints: numeric, so the
# kubelet can check runAsNonRoot.  It only serves HTTP(S) and talks to the
# API server.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpuvisor-scheduler"]
