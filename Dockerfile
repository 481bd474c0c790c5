# One image with every fluence binary: fluence-extender, fluence-webhook,
# fluence-deviceplugin, fluxion-rq and kubectl-fluence.
#
#   docker build -t fluence:0.1.0 .
#   kind load docker-image fluence:0.1.0      # for a kind cluster (deploy/kind-config.yaml)

# The kubelet's device plugin API definition, from the k8s.io/kubelet module pinned
# in hack/k8s-bins/go.mod.
FROM golang:1.26-bookworm AS proto
WORKDIR /src/hack/k8s-bins
COPY hack/k8s-bins/go.mod hack/k8s-bins/go.sum ./
RUN dir="$(go mod download -json k8s.io/kubelet | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')" \
 && cp "$dir/pkg/apis/deviceplugin/v1beta1/api.proto" /api.proto

# The wheel, with the C++ matcher compiled in.
FROM python:3.11-slim-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends g++ cmake ninja-build \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml CMakeLists.txt README.md ./
COPY fluxion_nb fluxion_nb
COPY fluence fluence
COPY scheduler_extender scheduler_extender
COPY webhook webhook
COPY deviceplugin deviceplugin
RUN pip wheel --no-deps -w /wheels .

FROM python:3.11-slim-bookworm
COPY --from=build /wheels /wheels
COPY --from=proto /api.proto /tmp/api.proto
# The device plugin's message classes are generated from the proto at install time
# (they are not kept in the source tree); grpcio-tools is only needed for that step.
RUN pip install --no-cache-dir /wheels/*.whl grpcio-tools \
 && python -m deviceplugin.stubgen --proto /tmp/api.proto \
 && pip uninstall -y grpcio-tools && rm -rf /wheels /tmp/api.proto
USER 65532:65532
ENTRYPOINT []
CMD ["fluence-extender"]
