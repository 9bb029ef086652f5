# syntax=docker/dockerfile:1
#
# eosink in a container: a static binary on distroless, as a non-root user,
# with its data dir on the volume /data.
#
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t eosink .
#   docker run -v eosink-data:/data -v $PWD/tokens:/etc/eosink/tokens:ro \
#     -e EOSINK_TOKEN_FILE=/etc/eosink/tokens -e EOSINK_NODE=ingest-1 -p 8080:8080 eosink
#
# The build step is scripts/build-static.sh, word for word the script that
# tests/TestStaticBuild runs (the test machines have no container runtime,
# so the script is what is tested; tests/TestDockerfile holds this file to
# it). Keep them the same: change the script, not this RUN line.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Without .git in the context, the revision comes from this argument
# (else `eosink version` says "revision unknown").
ARG REVISION=""
RUN EOSINK_REVISION="$REVISION" scripts/build-static.sh /out/eosink
# /data owned by the runtime user, so a new volume starts writable.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/eosink /eosink
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV EOSINK_LISTEN=0.0.0.0:8080 \
    EOSINK_DATA_DIR=/data \
    EOSINK_LOG_FORMAT=json
VOLUME /data
EXPOSE 8080
# Reads EOSINK_LISTEN and EOSINK_TLS_CERT like the service: no flags needed.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 CMD ["/eosink", "healthcheck"]
# docker stop sends SIGTERM and waits 10 s by default; the final checkpoint
# may take --shutdown-timeout (30 s): run with `docker stop -t 45` or
# stop_grace_period: 45s.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/eosink"]
CMD ["serve"]
