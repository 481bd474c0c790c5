# One image with every fluence binary: fluence-extender, fluence-webhook,
# fluence-deviceplugin, fluxion-rq and kubectl-fluence.
#
#   docker build -t fluence:0.1.0 .
#   kind load docker-image fluence:0.1.0      # for a kind cluster (deploy/kind-config.yaml)
#
# The base images are build arguments. Any Debian bookworm (or python:3.11) image
# with python3 and its venv module will do; the build stage also needs g++, cmake,
# ninja and the Python headers, and installs them with apt when they are missing.
# Without a registry, `python -m testbed images` builds both bases from Debian
# packages and runs this recipe with buildah.
ARG BUILD_BASE=python:3.11-slim-bookworm
ARG RUNTIME_BASE=python:3.11-slim-bookworm

# The wheel, with the C++ matcher compiled in.
FROM ${BUILD_BASE} AS build
RUN if ! command -v g++ >/dev/null || ! command -v cmake >/dev/null \
      || ! command -v ninja >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends g++ cmake ninja-build \
      && rm -rf /var/lib/apt/lists/*; \
    fi
RUN python3 -m venv /opt/build
WORKDIR /src
COPY pyproject.toml CMakeLists.txt README.md ./
COPY fluxion_nb fluxion_nb
COPY fluence fluence
COPY scheduler_extender scheduler_extender
COPY webhook webhook
COPY deviceplugin deviceplugin
RUN /opt/build/bin/pip wheel --no-deps -w /wheels .

# The binaries in a virtual environment of their own, on PATH.
FROM ${RUNTIME_BASE}
COPY --from=build /wheels /wheels
RUN python3 -m venv /opt/fluence \
 && /opt/fluence/bin/pip install --no-cache-dir /wheels/*.whl \
 && rm -rf /wheels
# The qrmi library the queue acquires and releases quantum resources with, in an
# environment of its own (it cannot share one with the Kubernetes client); the pins are
# pyproject.toml's qrmi dependency group.
COPY pyproject.toml /tmp/pyproject.toml
RUN python3 -m venv /opt/qrmi \
 && /opt/qrmi/bin/pip install --no-cache-dir $(python3 -c "import tomllib; \
    print(' '.join(tomllib.load(open('/tmp/pyproject.toml', 'rb'))['dependency-groups']['qrmi']))") \
 && rm /tmp/pyproject.toml
ENV PATH=/opt/fluence/bin:$PATH
USER 65532:65532
ENTRYPOINT []
CMD ["fluence-extender"]
