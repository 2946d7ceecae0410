# reservoir's container image (docs/deploy.md):
#
#   docker build -t reservoir:dev .      # or: podman build -t reservoir:dev .
#   docker run --rm reservoir:dev help
#
# The image is the one binary on a distroless base: no shell, no package
# manager, a non-root user. The entrypoint is reservoir itself, so any
# subcommand runs as `docker run IMAGE migrate up` (with $RESERVOIR_DSN).
# deploy/deploy_test.go holds this file to go.mod and the Kubernetes
# manifests (Go version, user, entrypoint, ports).

# The builder's Go: the minor version of go.mod's `go` line.
ARG GO_VERSION=1.26

# Fully qualified, so that podman needs no registry search list.
FROM docker.io/library/golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first: a change of the source alone does not download them again.
COPY go.mod go.sum ./
RUN go mod download && go mod verify
COPY . .
# Static (the runtime image has no libc), without the builder's paths
# (-trimpath), without the symbol table (-s -w); the module graph must be
# exactly go.mod's (-mod=readonly).
RUN CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="-s -w" -o /out/reservoir ./cmd/reservoir

FROM gcr.io/distroless/static-debian12:nonroot
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
