use super::*;

fn spec(module: &str, name: &str) -> FunctionSpec {
    FunctionSpec {
        name: name.into(),
        module: module.into(),
        description: format!("{name} does things"),
        parameters: json!({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"]}),
        file: format!("{module}.py"),
        line: 1,
        output_schema: None,
        output_wrapped: false,
        title: None,
        annotations: None,
        resource: None,
        task_support: None,
        task_after: None,
        timeout: None,
        timeout_grace: None,
    }
}

#[test]
fn structured_results_are_objects_wrapped_as_the_schema_says() {
    let mut f = spec("m", "f");
    assert_eq!(f.structured_result(json!({"a": 1})), None);
    f.output_schema = Some(json!({"type": "object"}));
    assert_eq!(f.structured_result(json!({"a": 1})), Some(json!({"a": 1})));
    assert_eq!(f.structured_result(json!([1])), None);
    f.output_wrapped = true;
    assert_eq!(
        f.structured_result(json!([1])),
        Some(json!({"result": [1]}))
    );
}

fn catalog() -> Catalog {
    Catalog::from_worker(
        "/f".into(),
        json!({"functions": [spec("z", "b"), spec("a", "y"), spec("a", "x"), spec("sub/m", "q")],
               "errors": []}),
    )
    .unwrap()
}

#[test]
fn functions_are_sorted_by_module_then_name() {
    let names: Vec<_> = catalog().functions.iter().map(|f| f.name.clone()).collect();
    assert_eq!(names, ["x", "y", "q", "b"]);
}

#[test]
fn list_puts_every_all_option_first() {
    let labels: Vec<_> = catalog()
        .list_options()
        .into_iter()
        .map(|o| o.label)
        .collect();
    assert_eq!(
        labels,
        [
            "a:All",
            "sub/m:All",
            "z:All",
            "a:x",
            "a:y",
            "sub/m:q",
            "z:b"
        ]
    );
    let options = catalog().list_options();
    assert_eq!(
        options[0].description,
        "Load all 2 functions from a.py (x, y)"
    );
    assert_eq!(options[3].value, "x");
}

#[test]
fn close_matches_find_typos() {
    let names = ["save_file", "read_file_segment", "wait"];
    assert_eq!(close_matches("save_fiel", names.into_iter()), ["save_file"]);
    assert!(close_matches("zzzzzz", names.into_iter()).is_empty());
}

#[test]
fn table_marks_optional_parameters() {
    let table = catalog().to_table();
    assert!(table.starts_with("MODULE"), "{table}");
    assert!(table.contains("a, b?"), "{table}");
}

#[test]
fn wrap_breaks_at_spaces_and_splits_long_words() {
    assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
    assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
    assert_eq!(wrap("", 3), [""]);
}
