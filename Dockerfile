# toposcope images, built from the repository root in stages. No image is published yet:
# build the ones you deploy and push them to your registry (docs/deploy.md, "Images").
#
#   docker build --target exporter -t registry.example.com/toposcope-exporter:0.1.0 .
#   docker build --target toposcope -t registry.example.com/toposcope:0.1.0 .
#   docker build --target agent -t registry.example.com/toposcope-agent:0.1.0 .
#
# exporter   the lean install (`pip install toposcope`: the exporter and topology tools only),
#            non-root; the Kubernetes DaemonSet runs it as root with two capabilities to read
#            every process. --build-arg EXPORTER_EXTRAS=kubernetes adds the kubelet's
#            pod-resources client (pod, namespace and container names on workload series).
# agent      every part, run as root: the node agent writes cgroups and sets the affinity of
#            other users' processes; its DaemonSet drops every capability but SYS_NICE and
#            SYS_PTRACE.
# toposcope  every part (advisor, Dash app, simulator, Slurm tools), non-root (uid 65532);
#            the last stage, so also what a build without --target makes.
#
# The source tree in the build context has no git metadata, so the version comes from the
# VERSION build argument (setuptools-scm's pretend version). Only the packaged folders are
# copied (see [tool.setuptools] in pyproject.toml): local virtual environments and run state
# never reach an image.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ARG VERSION=0.1.0
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SETUPTOOLS_SCM_PRETEND_VERSION=${VERSION}
# build_protos.py generates the pod-resources client's modules while the wheel is built
COPY pyproject.toml README.md LICENSE build_protos.py /src/
COPY toposcope /src/toposcope
COPY exporters /src/exporters
COPY agent /src/agent
COPY advisor /src/advisor
COPY dashboards /src/dashboards
COPY sim /src/sim
COPY slurm /src/slurm
COPY kube /src/kube
RUN pip wheel --no-deps --wheel-dir /wheels /src

# Each image gets its own virtual environment, made at the path it runs from (a virtual
# environment cannot be moved: its scripts name their interpreter by absolute path).
FROM build AS install-exporter
ARG EXPORTER_EXTRAS=exporter
RUN python -m venv /opt/toposcope \
    && /opt/toposcope/bin/pip install "$(ls /wheels/toposcope-*.whl)[${EXPORTER_EXTRAS}]"

FROM build AS install-all
RUN python -m venv /opt/toposcope \
    && /opt/toposcope/bin/pip install "$(ls /wheels/toposcope-*.whl)[all]"

# What every image shares: the interpreter, the labels, the `toposcope` entry point.
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="toposcope" \
      org.opencontainers.image.source="https://github.com/toposcope/toposcope" \
      org.opencontainers.image.documentation="https://github.com/toposcope/toposcope/blob/main/docs/deploy.md"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/toposcope/bin:$PATH
ENTRYPOINT ["toposcope"]

# The lean exporter image: what `pip install toposcope` installs, nothing more.
FROM runtime AS exporter
LABEL org.opencontainers.image.title="toposcope-exporter" \
      org.opencontainers.image.description="toposcope node exporter: GPU, NUMA, cross-socket and workload locality metrics"
COPY --from=install-exporter /opt/toposcope /opt/toposcope
USER 65532:65532
EXPOSE 9847
CMD ["exporter"]

# The node agent: every part, run as root (it changes cgroups and other users' processes);
# its DaemonSet keeps only the capabilities it needs.
FROM runtime AS agent
LABEL org.opencontainers.image.title="toposcope-agent" \
      org.opencontainers.image.description="toposcope node agent: applies affinity, cpuset and memory moves behind the resource-manager API"
COPY --from=install-all /opt/toposcope /opt/toposcope
USER 0:0
EXPOSE 9848
CMD ["agent"]

# Every part (advisor, Dash app, simulator, Slurm tools): the advisor Deployment's image.
FROM runtime AS toposcope
LABEL org.opencontainers.image.title="toposcope" \
      org.opencontainers.image.description="toposcope: topology-aware observability and tuning for GPU/CPU clusters"
COPY --from=install-all /opt/toposcope /opt/toposcope
USER 65532:65532
EXPOSE 9849
CMD ["advisor", "serve"]
