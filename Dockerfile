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
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="heartbeatd" \
      org.opencontainers.image.description="Alarms when IoT devices fall silent: deadlines in Redis, events to Kafka" \
      org.opencontainers.image.source="https://github.com/heartbeatd/heartbeatd" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/heartbeatd /usr/local/bin/heartbeatd
COPY configs/ /etc/heartbeatd/
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/heartbeatd"]
# compose.yaml serves the API on 0.0.0.0, so this refuses to start without a token: mount one and set
# HEARTBEATD_HTTP_TOKEN_FILE to its path (docker-compose.yml does, from deploy/secrets/api-token), or set
# HEARTBEATD_HTTP_TOKEN. It also reads the MQTT password from /run/secrets/mqtt-password
# (HEARTBEATD_INGEST_MQTT_PASSWORD_FILE moves it). Another config: -config, or mount over /etc/heartbeatd.
CMD ["run", "-config", "/etc/heartbeatd/compose.yaml"]
