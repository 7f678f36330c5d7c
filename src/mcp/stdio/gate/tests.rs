use super::*;

fn reply(verdict: Verdict) -> Vec<Value> {
    let Verdict::Reply(bytes) = verdict else {
        panic!("expected a reply, got {verdict:?}");
    };
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn bad_lines_get_json_rpc_errors() {
    let gate = Gate::new(1 << 20);
    let parse = reply(gate.line(br#"{"jsonrpc":"2.0","id":1,"method":"x","#));
    assert_eq!(parse[0]["error"]["code"], -32700);
    assert_eq!(parse[0]["id"], Value::Null);
    let surrogate =
        reply(gate.line(br#"{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":"\ud800"}}"#));
    assert_eq!(surrogate[0]["error"]["code"], -32700);
    let version = reply(gate.line(br#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#));
    assert_eq!(version[0]["error"]["code"], -32600);
    assert_eq!(version[0]["id"], 3);
    let bad_id = reply(gate.line(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#));
    assert_eq!(bad_id[0]["id"], Value::Null);
    assert!(bad_id[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("\"id\""));
    let batch = reply(gate.line(
        br#"[{"jsonrpc":"2.0","id":4,"method":"ping"},{"jsonrpc":"2.0","id":"five","method":"ping"}]"#,
    ));
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[0]["id"], 4);
    assert_eq!(batch[1]["id"], "five");
    assert_eq!(reply(gate.line(b"42"))[0]["error"]["code"], -32600);
    assert_eq!(gate.line(b"  "), Verdict::Skip);
}

/// Request 700 called, cancelled and called again: the second runs in
/// rmcp under an alias, which is returned (with the request rmcp got).
pub(in crate::mcp) fn reused_under_alias(gate: &Gate) -> (Value, Value) {
    let call = br#"{"jsonrpc":"2.0","id":700,"method":"tools/call","params":{"name":"a"}}"#;
    let cancel =
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":700}}"#;
    assert_eq!(gate.line(call), Verdict::Pass);
    assert_eq!(gate.line(cancel), Verdict::Pass);
    let Verdict::PassAs(aliased) = gate.line(call) else {
        panic!("not aliased")
    };
    let aliased: Value = serde_json::from_slice(&aliased).unwrap();
    (aliased["id"].clone(), aliased)
}

#[test]
fn a_cancelled_id_reused_runs_under_an_alias_and_is_answered_under_its_own() {
    let gate = Gate::new(1 << 20);
    let call = br#"{"jsonrpc":"2.0","id":700,"method":"tools/call","params":{"name":"a"}}"#;
    let cancel =
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":700}}"#;
    // Reused at once: rmcp gets it under an alias, every other member kept.
    let (alias, aliased) = reused_under_alias(&gate);
    assert_ne!(alias, json!(700));
    assert_eq!(aliased["params"]["name"], "a");
    // The first call's late answer (had rmcp sent it) keeps its id.
    assert_eq!(
        gate.answered(br#"{"jsonrpc":"2.0","id":700,"result":{"content":[]}}"#),
        None
    );
    // The second's comes back under the client's id.
    let answer = json!({"jsonrpc": "2.0", "id": alias, "result": {"n": 2}});
    let back = gate
        .answered(&serde_json::to_vec(&answer).unwrap())
        .expect("rewritten");
    let back: Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(
        back,
        json!({"jsonrpc": "2.0", "id": 700, "result": {"n": 2}})
    );
    // Reused again after its answer: under an alias still, for the first
    // call may still be ending in rmcp, and its end would take the id.
    let Verdict::PassAs(again) = gate.line(call) else {
        panic!("a later reuse of a cancelled id runs under an alias too")
    };
    let again: Value = serde_json::from_slice(&again).unwrap();
    assert_ne!(again["id"], alias);
    // A cancellation of an aliased request reaches rmcp for the alias.
    let Verdict::PassAs(cancelled) = gate.line(cancel) else {
        panic!("the cancel of an aliased request names its alias")
    };
    let cancelled: Value = serde_json::from_slice(&cancelled).unwrap();
    assert!(cancelled["params"]["requestId"]
        .as_str()
        .unwrap()
        .starts_with("toolpool-alias-"));
}

#[test]
fn requests_in_flight_have_a_budget_of_bytes_given_back_when_answered() {
    let gate = Gate::new(crate::mcp::BODIES_IN_FLIGHT);
    let big = |id: u32| {
        let text = "x".repeat(60 << 20);
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"a","arguments":{{"t":"{text}"}}}}}}"#
        )
    };
    for id in 1..=4 {
        assert_eq!(gate.line(big(id).as_bytes()), Verdict::Pass, "{id}");
    }
    let busy = reply(gate.line(big(5).as_bytes()));
    assert_eq!(busy[0]["error"]["code"], -32000);
    assert!(busy[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Server busy"));
    gate.answered(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    assert_eq!(gate.line(big(5).as_bytes()), Verdict::Pass);
}

#[test]
fn an_id_in_flight_cannot_be_reused_until_answered() {
    let gate = Gate::new(1 << 20);
    let ping = br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
    assert_eq!(gate.line(ping), Verdict::Pass);
    let again = reply(gate.line(ping));
    assert_eq!(again[0]["id"], 7);
    assert!(again[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("already in flight"));
    // The string "7" is another id.
    assert_eq!(
        gate.line(br#"{"jsonrpc":"2.0","id":"7","method":"ping"}"#),
        Verdict::Pass
    );
    gate.answered(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#);
    assert_eq!(gate.line(ping), Verdict::Pass);
    // A cancellation frees the id too (its reuse runs under an alias).
    gate.line(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#);
    assert!(matches!(gate.line(ping), Verdict::PassAs(_)));
    // A request from the server with the same id is not a response.
    gate.answered(br#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{}}"#);
    assert!(matches!(gate.line(ping), Verdict::Reply(_)));
}

#[test]
fn long_lines_are_cut_off_and_answered_with_their_id() {
    let mut splitter = LineSplitter::new(100);
    let mut pieces = Vec::new();
    let long = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{{\"x\":\"{}\"}}}}\nnext\n",
        "a".repeat(500)
    );
    for chunk in long.as_bytes().chunks(7) {
        splitter.push(chunk, &mut |p| pieces.push(p));
    }
    assert_eq!(pieces.len(), 2);
    let Piece::Oversized(prefix) = &pieces[0] else {
        panic!("{pieces:?}")
    };
    assert_eq!(pieces[1], Piece::Line(b"next".to_vec()));
    let gate = Gate::new(100);
    let answer: Value = serde_json::from_slice(&gate.oversized(prefix)).unwrap();
    assert_eq!(answer["id"], 9);
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("limit of 100 bytes"));
    assert_eq!(id_in_prefix(br#"{"method":"x","params":{"a":[1,2"#), None);
    assert_eq!(
        id_in_prefix(br#" {"jsonrpc":"2.0", "id" : "s1", "#),
        Some(json!("s1"))
    );
    splitter.push(b"tail", &mut |p| pieces.push(p));
    assert_eq!(splitter.finish(), Some(Piece::Line(b"tail".to_vec())));
    assert_eq!(splitter.finish(), None);
}
