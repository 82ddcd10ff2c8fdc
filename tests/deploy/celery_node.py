"""[core] hostname_callable of a deployment whose task instances record the Celery node that ran them
(airflow_deploy.airflow_env(celery_node_hostnames=True)). Airflow's processes import it from this folder, so it
imports nothing of the tests."""

import socket


def celery_node_hostname() -> str:
    """Inside a Celery task (where the task supervisor runs, and reports the hostname when the task starts and on
    every heartbeat) the name of the Celery node running it; elsewhere (scheduler, api-server, ...) the machine's
    FQDN, as Airflow's default does."""
    from celery import current_task

    if current_task and current_task.request.hostname:
        return current_task.request.hostname
    return socket.getfqdn()
