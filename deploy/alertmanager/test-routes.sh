#!/usr/bin/env bash
# Routing tests for the generated Alertmanager config (needs amtool, from Debian's
# prometheus-alertmanager package). Usage: deploy/alertmanager/test-routes.sh [config]
# Exit status 0 when every case routes where it should; each failure is printed.
set -u
config="${1:-$(dirname "$0")/alertmanager.yml}"
failures=0

expect_receiver() {  # expect_receiver RECEIVER LABEL=VALUE...
  local want="$1"; shift
  if ! out=$(amtool config routes test --config.file="$config" --verify.receivers="$want" "$@" 2>&1); then
    echo "FAIL: {$*} should route to $want: $out"; failures=$((failures + 1))
  else
    echo "ok:   {$*} -> $want"
  fi
}

expect_leaf() {  # expect_leaf 'MATCHER' LABEL=VALUE... : the deepest matched route
  local want="$1"; shift
  out=$(amtool config routes test --config.file="$config" --tree "$@" 2>&1)
  if ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: {$*} should match route $want:"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok:   {$*} matches $want"
  fi
}

# The compilation alert goes to its owner team, whatever the model's team is.
expect_receiver compiler alertname=EttComponentBudgetBurn team=compiler severity=page \
  slo=compilation-share component=compilation model=llama model_team=nlp
# Page and ticket take their own severity route under the team.
expect_leaf '{severity="page"}  receiver: compiler' alertname=EttComponentBudgetBurn team=compiler severity=page
expect_leaf '{severity="ticket"}  receiver: compiler' alertname=EttComponentBudgetBurn team=compiler severity=ticket
# Every team in deploy/teams.yaml has its own receiver.
for team in scheduler trainer-platform compiler checkpointing data-platform reliability publishing telemetry; do
  expect_receiver "$team" alertname=Any team="$team" severity=ticket
done
# The pipeline and missing-data alerts reach telemetry.
expect_receiver telemetry alertname=EttPipelineStale team=telemetry severity=page category=pipeline
expect_receiver telemetry alertname=EttSloDataAbsent team=telemetry severity=ticket slo=fleet-ett
# Unknown team, or none at all: the catch-all.
expect_receiver catch-all alertname=EttComponentBudgetBurn team=nlp severity=page
expect_receiver catch-all alertname=Watchdog severity=ticket

if [ "$failures" -gt 0 ]; then echo "$failures routing case(s) failed"; exit 1; fi
echo "all routing cases passed"
