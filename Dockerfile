# nodedns image: a static nodedns binary on Debian 12 (bookworm) slim with
# iptables, which carries both backends (iptables-nft and iptables-legacy,
# and their -save and ip6tables variants); the agent picks the one the
# node's kube-proxy uses. Build:
#
#   docker build --build-arg VERSION=$(git describe --always) -t REGISTRY/nodedns:TAG .
#
# scripts/check-image.sh checks what can be checked without a Docker engine:
# the binary is static and every iptables path the agent runs exists in
# bookworm's iptables package.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/nodedns ./cmd/nodedns

FROM debian:bookworm-slim
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
