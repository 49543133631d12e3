"""The bank of the tour: the documentation's ``AccountBalance`` table, its three change streams
(one per value capture type), and the read function's queries in both SQL dialects."""

TABLE = "AccountBalance"
COLUMNS = ("AccountId", "LastUpdate", "Balance")
STREAM = "AccountBalanceStream"
NEW_VALUES_STREAM = "AccountBalanceNewValues"
NEW_ROW_STREAM = "AccountBalanceNewRow"
TRANSFER_TAG = "app=banking,env=prod,action=update"
TAIL_TAG = "app=banking,env=demo,action=tail"
STARTING_BALANCE = 1500
ACCOUNTS = ("Id1", "Id2", "Id3")
WORKFLOW_HEARTBEAT_MS = 10_000
TAIL_HEARTBEAT_MS = 1_000

SCHEMA = [
    f"CREATE TABLE {TABLE} (AccountId STRING(MAX) NOT NULL, "
    "LastUpdate TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true), "
    "Balance INT64 NOT NULL) PRIMARY KEY (AccountId)",
    f"CREATE CHANGE STREAM {STREAM} FOR {TABLE}",
    f"CREATE CHANGE STREAM {NEW_VALUES_STREAM} FOR {TABLE} "
    "OPTIONS (value_capture_type = 'NEW_VALUES')",
    f"CREATE CHANGE STREAM {NEW_ROW_STREAM} FOR {TABLE} OPTIONS (value_capture_type = 'NEW_ROW')",
]

GOOGLESQL_QUERY = f"""SELECT ChangeRecord FROM READ_{STREAM} (
  start_timestamp => @start,
  end_timestamp => @end,
  partition_token => @token,
  heartbeat_milliseconds => {WORKFLOW_HEARTBEAT_MS}
)"""

POSTGRESQL_QUERY = f"""SELECT *
FROM "spanner"."read_json_{STREAM}" (
  $1, $2, $3, {WORKFLOW_HEARTBEAT_MS}, NULL
)"""
