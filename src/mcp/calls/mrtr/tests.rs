use super::*;

#[test]
fn the_input_key_is_the_tools_when_it_is_a_plain_name() {
    let asking = |key: serde_json::Value| PromptRequest {
        session_id: "s".into(),
        node_id: String::new(),
        task_description: "What is your name?".into(),
        inputs: None,
        metadata: [("input_key".to_string(), key)].into_iter().collect(),
        tool: "t".into(),
    };
    assert_eq!(
        input_key(&asking(serde_json::json!("user_name"))),
        "user_name"
    );
    for refused in [
        serde_json::json!(""),
        serde_json::json!("a b"),
        serde_json::json!(7),
        serde_json::json!("x".repeat(65)),
    ] {
        assert_eq!(input_key(&asking(refused.clone())), INPUT_KEY, "{refused}");
    }
}

#[test]
fn a_state_opens_only_with_its_binding_and_key() {
    let trips = RoundTrips::new(None, None);
    let binding = [7u8; 32];
    let state = trips.seal(&[1u8; 16], &binding);
    assert_eq!(trips.open(&state, &binding).unwrap(), [1u8; 16]);
    assert!(matches!(
        trips.open(&state, &[8u8; 32]),
        Err(StateError::Forged)
    ));
    assert!(matches!(
        RoundTrips::new(None, None).open(&state, &binding),
        Err(StateError::Forged)
    ));
    let mut tampered = state.into_bytes();
    tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert!(matches!(
        trips.open(&tampered, &binding),
        Err(StateError::Forged)
    ));
    assert!(matches!(
        trips.open("not base64!", &binding),
        Err(StateError::Forged)
    ));
}

/// Sets its flag when dropped: stands for the worker a dropped call kills.
struct Dropped(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

#[tokio::test]
async fn a_call_not_answered_in_time_is_ended_and_its_handle_says_so() {
    let trips = RoundTrips::new(Some(Duration::from_millis(50)), None);
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let guard = Dropped(ended.clone());
    let running = Running::start(move |human| async move {
        let _guard = guard;
        let request = PromptRequest {
            session_id: "s".into(),
            node_id: "n".into(),
            task_description: "Approve?".into(),
            inputs: None,
            metadata: Default::default(),
            tool: "t".into(),
        };
        let _ = human.request(request).await;
        std::future::pending::<CallReport>().await
    });
    let binding = [3u8; 32];
    let Step::Asks(input) = trips
        .drive(running, binding, &CancellationToken::new(), None)
        .await
    else {
        panic!("the call did not ask");
    };
    let state = input.request_state.expect("a requestState");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ended.load(std::sync::atomic::Ordering::Acquire) {
        assert!(
            std::time::Instant::now() < deadline,
            "the call was never ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..2 {
        let late = trips.resume(&state, &binding, None).err();
        assert!(matches!(late, Some(StateError::Expired { .. })), "{late:?}");
        assert_eq!(
            late.map(|e| e.to_string()).as_deref(),
            Some("no answer within 0.05 s (--human-timeout); the call was ended")
        );
    }
    // Another binding still fails its check first.
    assert!(matches!(
        trips.resume(&state, &[4u8; 32], None),
        Err(StateError::Forged)
    ));
}

#[test]
fn the_binding_covers_client_tool_and_arguments() {
    let client = rmcp::model::Implementation::new("c", "1");
    let a = binding(Some(&client), None, "t", &serde_json::json!({"x": 1}));
    assert_ne!(a, binding(None, None, "t", &serde_json::json!({"x": 1})));
    assert_ne!(
        a,
        binding(Some(&client), None, "u", &serde_json::json!({"x": 1}))
    );
    assert_ne!(
        a,
        binding(Some(&client), None, "t", &serde_json::json!({"x": 2}))
    );
    // Another tenant's handle is not this tenant's.
    let alice = binding(
        Some(&client),
        Some("alice"),
        "t",
        &serde_json::json!({"x": 1}),
    );
    assert_ne!(alice, a);
    let bob = binding(
        Some(&client),
        Some("bob"),
        "t",
        &serde_json::json!({"x": 1}),
    );
    assert_ne!(alice, bob);
    // So alice's handle, in bob's request, is refused as a made-up one is,
    // and says nothing of alice's call.
    let trips = RoundTrips::new(None, None);
    let state = trips.seal(&[1u8; 16], &alice);
    assert!(matches!(trips.open(&state, &bob), Err(StateError::Forged)));
    let made_up = RoundTrips::new(None, None).seal(&[1u8; 16], &bob);
    assert!(matches!(
        trips.open(&made_up, &bob),
        Err(StateError::Forged)
    ));
    assert_eq!(trips.open(&state, &alice).unwrap(), [1u8; 16]);
}
