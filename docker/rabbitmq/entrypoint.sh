#!/bin/sh
# outboxlab-rabbitmq runs RabbitMQ in the foreground; the node name comes from
# RABBITMQ_NODENAME (rabbit@localhost), not from the container's hostname.
set -eu
exec rabbitmq-server "$@"
