# courier: one static binary. Build context is the repository root.
# -tags slim leaves out the embedded Temporal server, its UI and NATS, which only `courier dev`
# and `courier bench` use (docs/deployment.md, "The image"); `make image-binary` builds the same.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -tags slim -trimpath -ldflags="-s -w" -o /out/courier ./cmd/courier

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/courier /usr/local/bin/courier
USER nonroot
ENTRYPOINT ["/usr/local/bin/courier"]
CMD ["--help"]
