# syntax=docker/dockerfile:1
# The Runway image for a container builder (`docker build`, `buildah bud`, `kaniko`…).
# `make image` builds the same image without a daemon: the same tree (image/rootfs.sh) and
# the same configuration (image/build.sh); tests/chart/test_image.py keeps the two in step.
#
#   docker build --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(git log -1 --format=%cI) -t runway:0.1.0 .

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
ARG REVISION=unknown
WORKDIR /src
COPY . .
# The commit is named by the build argument: a build context need not carry .git.
RUN RUNWAY_COMMIT="${REVISION}" cargo build --release --locked --bin runway \
 && image/rootfs.sh target/release/runway /rootfs

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
COPY --from=build /rootfs /
USER 65532:65532
WORKDIR /
ENV PATH=/usr/local/bin
ENTRYPOINT ["/usr/local/bin/runway"]
CMD ["operator"]
LABEL org.opencontainers.image.title="runway" \
      org.opencontainers.image.description="Kubernetes operator that serves Workflows as durable MCP tools and Runs as MCP tasks" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="Runway"
