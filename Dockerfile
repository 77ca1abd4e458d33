# nodedns image: a static nodedns binary on Debian 12 (bookworm) slim with
# iptables, which carries both backends (iptables-nft and iptables-legacy,
# and their -save and ip6tables variants); the agent picks the one the
# node's kube-proxy uses.
#
# Multi-architecture (amd64, arm64, anything Go and Debian both support):
# the build stage runs on the builder's own platform and cross-compiles for
# the target, so no emulation is needed:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$(git describe --always --dirty) \
#     -t REGISTRY/nodedns:TAG --push .
#
# Base images: release builds pin them by digest, which a registry resolves
# and this repository cannot (no registry is reachable where it is tested):
#
#   --build-arg GO_IMAGE=golang:1.26-bookworm@sha256:<digest> \
#   --build-arg BASE_IMAGE=debian:bookworm-slim@sha256:<digest>
#
# (`docker buildx imagetools inspect debian:bookworm-slim` prints the
# digest of the multi-architecture index to pin.)
#
# This file is the one description of the image: scripts/image.sh builds
# the same image without a Docker engine by reading it (internal/imagebuild
# refuses any instruction it cannot reproduce), and a test compares the
# built image with this file.
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/nodedns ./cmd/nodedns

FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/nodedns /nodedns
# Root inside the container is needed: iptables refuses to run for other
# users even with CAP_NET_ADMIN (Kubernetes grants no ambient
# capabilities). The DaemonSet drops every capability but the ones the agent
# uses, forbids privilege escalation and mounts the root filesystem
# read-only.
USER 0:0
ENTRYPOINT ["/nodedns"]
CMD ["serve", "--config=/etc/nodedns/config.yaml"]
