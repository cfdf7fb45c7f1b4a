#!/usr/bin/env bash
# The image's OCI labels (org.opencontainers.image.*), one `key=value` a line, for
# image/build.sh; the Dockerfile declares the same keys.
#
#   image/labels.sh VERSION COMMIT CREATED
set -euo pipefail
cat <<LABELS
org.opencontainers.image.title=runway
org.opencontainers.image.description=Kubernetes operator that serves Workflows as durable MCP tools and Runs as MCP tasks
org.opencontainers.image.version=$1
org.opencontainers.image.revision=$2
org.opencontainers.image.created=$3
org.opencontainers.image.licenses=Apache-2.0
org.opencontainers.image.vendor=Runway
LABELS
