# The reins binary in a container: static, non-root, nothing else in the image.
#   docker build -t reins --build-arg VERSION=v0.3.0 --build-arg COMMIT=$(git rev-parse --short HEAD) .
#   docker run --rm reins --help
# deploy/container/compose.yaml runs it against a three-node NATS cluster (docs/deploy.md).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# What reins version prints: the build context has no .git to read them from (.dockerignore).
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.stampedVersion=${VERSION} -X main.stampedCommit=${COMMIT}" -o /out/reins ./cmd/reins

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/reins /usr/local/bin/reins
USER nonroot:nonroot
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/reins"]
CMD ["serve", "--data", "/home/nonroot/data"]
