#!/usr/bin/env bash
# Builds the Kafka Streams baseline into bench/kstreams/target/kstreams-baseline.jar
# (dependencies cached in ~/.m2; rebuilds only when a source is newer than the jar).
set -euo pipefail
cd "$(dirname "$0")"
JAR=target/kstreams-baseline.jar
if [[ -f $JAR ]] && [[ -z $(find pom.xml src -newer "$JAR" -print -quit) ]]; then
  echo "$PWD/$JAR"; exit 0
fi
nice -n 10 mvn -q -B package >&2
echo "$PWD/$JAR"
