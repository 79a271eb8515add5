# The export package's Airflow image: the stock Airflow 3.3.2 image made exactly our runtime lock
# (requirements.txt: Airflow, the providers and libraries the product uses, every hash checked; no
# test tool) plus our wheel (export_lib, export_airflow, their plugins, provider metadata and
# cluster policy entry points). docker-compose.yaml builds and runs it; so can Kubernetes
# (deploy/kubernetes/).
#   docker build -t airflow-scheduled-exports:0.1.0 .
# Every install step is scripts/install.sh, which tests/system/deploy/test_install.py runs in a
# fresh venv (ADR 0026): this file only copies files and calls it.
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11

# The wheel, built from the sources (.dockerignore keeps venvs, state and exports out).
FROM ${AIRFLOW_IMAGE} AS wheel
COPY --chown=airflow:0 . /opt/airflow/src
RUN bash /opt/airflow/src/scripts/install.sh wheel /opt/airflow/src /opt/airflow/dist

# The runtime: the image's Python environment (its VIRTUAL_ENV, ~/.local) becomes the runtime
# lock, without resolving: the stock image's other providers and versions are removed or
# replaced, and the check fails the build naming any package the lock misses. The dev lock is
# only read for the uv version the install uses (from a temporary directory, not installed).
FROM ${AIRFLOW_IMAGE}
COPY --chown=airflow:0 requirements.txt requirements-dev.txt scripts/install.sh \
     /opt/airflow/install/
COPY --chown=airflow:0 --from=wheel /opt/airflow/dist/ /opt/airflow/install/dist/
RUN bash /opt/airflow/install/install.sh lock /opt/airflow/install/requirements.txt \
        /opt/airflow/install/dist/airflow_scheduled_exports-0.1.0-py3-none-any.whl \
    && rm -rf /home/airflow/.cache
# The pools airflow-init imports. The cluster policy and the preload come with the wheel (its
# airflow.policy entry point): no airflow_local_settings.py. The DAG folder (loaders and company
# files) is mounted or baked in by the deployment: it is configuration, not code.
COPY --chown=airflow:0 deploy/pools.json /opt/airflow/deploy/pools.json
