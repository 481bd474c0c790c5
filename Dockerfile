# One image with every fluence binary: fluence-extender, fluence-webhook,
# fluence-deviceplugin, fluxion-rq and kubectl-fluence.
#
#   docker build -t fluence:0.1.0 .
#   kind load docker-image fluence:0.1.0      # for a kind cluster (deploy/kind-config.yaml)

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
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENTRYPOINT []
CMD ["fluence-extender"]
