# failoverd and failoverctl on Debian 12. The build stage runs exactly what CI
# runs (scripts/deps, scripts/build); the runtime stage carries only the two
# binaries and their shared libraries, and runs as a non-root user.
FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN apt-get update \
 && scripts/deps \
 && scripts/build -DFAILOVERD_BENCH=OFF \
 && strip build/server/failoverd build/client/failoverctl

FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates libabsl20220623 libc-ares2 libcivetweb1 libcurl4 libgrpc++1.51 libgrpc29 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprotobuf32 libre2-9 libsnappy1v5 liblz4-1 \
      libzstd1 libbz2-1.0 libyaml-cpp0.7 libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 failoverd \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/failoverd --shell /usr/sbin/nologin failoverd \
 && mkdir -p /var/lib/failoverd /etc/failoverd/config \
 && chown 10001:10001 /var/lib/failoverd
COPY --from=build /src/build/server/failoverd /src/build/client/failoverctl /usr/local/bin/
COPY --from=build /src/examples/config /etc/failoverd/config
USER 10001:10001
EXPOSE 50051 9464
VOLUME ["/var/lib/failoverd"]
ENTRYPOINT ["failoverd"]
CMD ["--listen=0.0.0.0:50051", "--metrics-listen=0.0.0.0:9464", "--data-dir=/var/lib/failoverd", "--config=/etc/failoverd/config"]
