# Multi-stage build: a static binary on a distroless base, running as non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/heartbeatd ./cmd/heartbeatd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/heartbeatd /usr/local/bin/heartbeatd
COPY configs/ /etc/heartbeatd/
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/heartbeatd"]
CMD ["run", "-config", "/etc/heartbeatd/compose.yaml"]
