# The reins binary in a container: static, non-root, nothing else in the image.
#   docker build -t reins .
#   docker run --rm reins --help
# deploy/container/compose.yaml runs it against a three-node NATS cluster (docs/deploy.md).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/reins ./cmd/reins

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/reins /usr/local/bin/reins
USER nonroot:nonroot
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/reins"]
CMD ["serve", "--data", "/home/nonroot/data"]
