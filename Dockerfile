# reservoir's container image (docs/deploy.md, "1. Build the image"):
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg GOLANG_DIGEST=sha256:... --build-arg DISTROLESS_DIGEST=sha256:... \
#     --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t registry.example.com/reservoir:v1.2.3 --push .
#
# The image is the one binary on a distroless base: no shell, no package
# manager, a non-root user. The entrypoint is reservoir itself, so any
# subcommand runs as `docker run IMAGE migrate up` (with $RESERVOIR_DSN).
# deploy/deploy_test.go holds this file to go.mod and the Kubernetes
# manifests (Go version, user, entrypoint, ports, digests, platforms,
# labels), and builds the binary as the build stage does to check what it
# links.

# The builder's Go: the minor version of go.mod's `go` line.
ARG GO_VERSION=1.26

# Both base images are pulled by digest, never by tag alone: a tag moves,
# a digest names one image. Give the digest of each tag's multi-platform
# index (`crane digest IMAGE:TAG`, or the Digest line of `docker buildx
# imagetools inspect IMAGE:TAG`) for the release being built; docs/deploy.md
# says how. There is no default: without them the build stops at FROM
# (an invalid reference) rather than build on whatever the tags name today.
ARG GOLANG_DIGEST
ARG DISTROLESS_DIGEST

# The build runs on the builder's own platform (no emulation) and
# cross-compiles for each target platform: Go needs no C toolchain for it.
# Fully qualified, so that podman needs no registry search list.
FROM --platform=$BUILDPLATFORM docker.io/library/golang:${GO_VERSION}-bookworm@${GOLANG_DIGEST} AS build
# Set by buildx (and podman) for each --platform: linux/amd64, linux/arm64, ...
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Modules first: a change of the source alone does not download them again.
COPY go.mod go.sum ./
RUN go mod download && go mod verify
COPY . .
# Static (the runtime image has no libc), without the builder's paths
# (-trimpath), without the symbol table (-s -w); the module graph must be
# exactly go.mod's (-mod=readonly). -tags nobench leaves out `reservoir
# bench` and the fault injection it links (toxiproxy and its HTTP stack):
# the serving image needs neither (internal/cli/bench_nobench.go).
# VERSION and REVISION (the labels' below) are what `reservoir version`
# prints: the build context leaves .git out, so Go cannot record the commit
# itself (without REVISION, it prints the commit as unknown).
ARG VERSION=dev
ARG REVISION
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -mod=readonly -tags nobench -trimpath \
      -ldflags="-s -w -X github.com/seed31b0e981/reservoir/internal/cli.Version=${VERSION} -X github.com/seed31b0e981/reservoir/internal/cli.Revision=${REVISION}" \
      -o /out/reservoir ./cmd/reservoir

FROM gcr.io/distroless/static-debian12:nonroot@${DISTROLESS_DIGEST}
# What the image is, for registries and scanners (the OCI annotation keys).
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="reservoir" \
      org.opencontainers.image.description="Moves inventory reservations from Redis to MySQL under live traffic: the checkout API, the admin API and the rollout's commands" \
      org.opencontainers.image.source="https://github.com/seed31b0e981/reservoir" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/reservoir /reservoir
# distroless's "nonroot" user, numeric so that Kubernetes' runAsNonRoot can
# verify it without an /etc/passwd lookup.
USER 65532:65532
# 8080: the checkout API (/v1; serve --addr).
# 8081: the admin listener (serve --admin-addr): admin API, dashboard,
#       /metrics, /healthz, /readyz.
EXPOSE 8080 8081
ENTRYPOINT ["/reservoir"]
# serve also needs the checkout API's clients (--clients or
# $RESERVOIR_CLIENTS_FILE) and, for the admin API, $RESERVOIR_ADMIN_TOKEN.
CMD ["serve", "--topology=/etc/reservoir/topology/topology.toml", "--addr=:8080", "--admin-addr=:8081"]
