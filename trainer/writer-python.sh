#!/bin/sh
# The checkpoint writer's interpreter (trainer/async_writer.py starts the writer process through
# this): it shares the trainer's process group, which torchrun signals as a whole, and would die
# of a stop signal during its seconds of imports. An ignored signal stays ignored across exec,
# so the interpreter starts with SIGINT and SIGTERM ignored, while the trainer keeps its handlers.
trap '' INT TERM
exec "$TRAINER_WRITER_PYTHON" "$@"
