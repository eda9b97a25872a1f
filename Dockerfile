# For container users (docker-compose.yml); the platform itself never needs Docker.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# Java for the accuracy report's Spark job (PySpark 4 runs on Java 17)
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
# The runtime set only: no test, docs or profiling packages in the image (requirements/)
COPY requirements/runtime.txt requirements/
RUN pip install --no-cache-dir -r requirements/runtime.txt
COPY . .
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput -v0
# Production settings from here on (docs/security.md): HTTPS only, and start-up refuses a weak
# SECRET_KEY or DEBUG=1. Set after collectstatic, whose throwaway key would be refused.
ENV DELAY_PRODUCTION=1
EXPOSE 8000
CMD ["gunicorn", "delayplatform.wsgi", "--bind", "0.0.0.0:8000", "--workers", "2"]
