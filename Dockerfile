# toposcope image: the `toposcope` command (exporter, advisor, topology tools) on Python 3.11.
#
# Build it from the repository root and push it where your nodes pull from; the Kubernetes
# manifests in deploy/kubernetes/ name it ghcr.io/toposcope/toposcope:0.1.0:
#
#   docker build -t ghcr.io/toposcope/toposcope:0.1.0 .
#
# Only the packaged folders are copied (see [tool.setuptools] in pyproject.toml), so local
# virtual environments and run state never reach the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# build_protos.py generates the pod-resources client's modules during the install
COPY pyproject.toml README.md build_protos.py /src/
COPY toposcope /src/toposcope
COPY exporters /src/exporters
COPY agent /src/agent
COPY advisor /src/advisor
COPY dashboards /src/dashboards
COPY sim /src/sim
COPY slurm /src/slurm
RUN pip install "/src[all]" && rm -rf /src

EXPOSE 9847
ENTRYPOINT ["toposcope"]
CMD ["exporter"]
