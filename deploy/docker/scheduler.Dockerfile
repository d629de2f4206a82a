# gpuvisor-scheduler image (extender + admission webhook).
# Build from the repository root (docs/install.md, "Images"):
#   docker build -f deploy/docker/scheduler.Dockerfile -t gpuvisor/gpuvisor-scheduler .
#
# Base pinned by digest; see node.Dockerfile for where the digest comes from
# (not verified against the registry here) and how to refresh it.
ARG BASE=debian:bookworm-slim@sha256:7802002798b0e351323ed2357ae6dc5a8c4d0a05a57e7f4d8f97136151d3d603

FROM ${BASE} AS build
COPY scripts/debian-packages.txt scripts/packages.sh /tmp/pk/
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(/tmp/pk/packages.sh build) \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" build/bin/gpuvisor-scheduler \
 && strip build/bin/gpuvisor-scheduler

FROM ${BASE}
COPY scripts/debian-packages.txt scripts/packages.sh /tmp/pk/
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(/tmp/pk/packages.sh runtime) \
 && rm -rf /var/lib/apt/lists/* /tmp/pk
COPY --from=build /src/build/bin/gpuvisor-scheduler /usr/local/bin/gpuvisor-scheduler
# No root needed: it only serves HTTP(S) and talks to the API server.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpuvisor-scheduler"]
