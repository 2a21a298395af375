#!/usr/bin/env bash
# Runs a Python test script with the system python3 (standard library only).
exec python3 -u "$@"
