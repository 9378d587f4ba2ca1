//! Tests of the contract (MISSION K1): one per row of the check table, a `rejects_*` per
//! validation error, the pinned JSON, the pin table, proptests.

use proptest::prelude::*;

use super::*;

const Q: Option<Semantics> = Some(Semantics::Query);
const I: Option<Semantics> = Some(Semantics::IdempotentCommand);
const N: Option<Semantics> = Some(Semantics::NonRepeatableCommand);
const U: Option<Semantics> = None;
/// Every semantics, least dangerous first.
const ALL: [Option<Semantics>; 4] = [Q, I, N, U];

fn method(name: &str, semantics: Option<Semantics>) -> MethodContract {
    MethodContract {
        name: name.to_owned(),
        semantics,
        shape: Shape::Unary,
        execution: default_execution(semantics),
        conflate: false,
        guarded: None,
    }
}

fn service(channel: &str, methods: Vec<MethodContract>) -> ServiceContract {
    ServiceContract {
        methods,
        ..ServiceContract::new(channel)
    }
}

fn node(services: Vec<ServiceContract>) -> NodeContract {
    NodeContract {
        services,
        ..NodeContract::new("pump-1")
    }
}

/// A pump: a query, a conflating setpoint and a non-repeatable dispense.
fn pump() -> NodeContract {
    let mut setpoint = method("set_setpoint", I);
    setpoint.conflate = true;
    node(vec![service(
        "pump",
        vec![method("dispense", N), method("pressure", Q), setpoint],
    )])
}

/// `pump()` with one method changed by `edit`.
fn pump_with(name: &str, edit: impl FnOnce(&mut MethodContract)) -> NodeContract {
    let mut c = pump();
    let m = c.services[0].methods.iter_mut().find(|m| m.name == name);
    edit(m.expect("a method of pump()"));
    c
}

/// The only change of a report (fails the test if there is not exactly one).
fn only(report: &CheckReport) -> &Change {
    assert_eq!(report.changes.len(), 1, "{report:#?}");
    &report.changes[0]
}

// ----- semantics, danger, pin, execution -----

#[test]
fn k1_semantics_names_and_serde() {
    for (s, name) in ALL.iter().zip([
        "query",
        "idempotent-command",
        "non-repeatable-command",
        "undeclared",
    ]) {
        assert_eq!(semantics_name(*s), name);
        assert_eq!(parse_semantics(name), Some(*s));
    }
    assert_eq!(parse_semantics("Query"), None);
    for s in Semantics::ALL {
        assert_eq!(
            serde_json::to_string(&s).ok(),
            Some(format!("\"{}\"", s.as_str()))
        );
        assert_eq!(s.to_string(), s.as_str());
    }
}

#[test]
fn k1_wire_conversions_round_trip() {
    for s in ALL {
        assert_eq!(from_wire(to_wire(s)), s);
    }
    for w in wire::Semantics::ALL {
        assert_eq!(to_wire(from_wire(*w)), *w);
    }
    assert_eq!(to_wire(U), wire::Semantics::Undeclared);
    assert_eq!(u8::from(to_wire(U)), 0);
}

/// K1: the danger order is query < idempotent < non-repeatable < undeclared.
#[test]
fn k1_danger_order() {
    let ranks: Vec<u8> = ALL.iter().map(|s| danger(*s)).collect();
    assert_eq!(ranks, vec![0, 1, 2, 3]);
}

/// K1: `pin_allows` over all 4x4 (pin, actual), as an explicit table, and in agreement
/// with the danger order.
#[test]
fn k1_pin_allows_all_combinations() {
    use wire::Semantics as W;
    // Rows: the pin; columns: the actual semantics Q, I, N, U.
    let table = [
        (W::Undeclared, [true, true, true, true]),
        (W::Query, [true, false, false, false]),
        (W::IdempotentCommand, [true, true, false, false]),
        (W::NonRepeatableCommand, [true, true, true, false]),
    ];
    assert_eq!(table.len(), W::ALL.len());
    for (pin, row) in table {
        for (actual, allowed) in ALL.iter().zip(row) {
            assert_eq!(
                pin_allows(pin, *actual),
                allowed,
                "pin {pin:?}, actual {actual:?}"
            );
            assert_eq!(allowed, danger(*actual) <= danger(from_wire(pin)));
        }
    }
}

#[test]
fn k4_default_execution_is_graded_by_semantics() {
    assert_eq!(default_execution(Q), ExecutionKind::Parallel);
    assert_eq!(default_execution(I), ExecutionKind::Serial);
    assert_eq!(default_execution(N), ExecutionKind::Serial);
    assert_eq!(default_execution(U), ExecutionKind::Parallel);
    for s in ALL {
        assert_eq!(effective_execution(None, s), default_execution(s));
        assert_eq!(
            effective_execution(Some(ExecutionKind::Keyed), s),
            ExecutionKind::Keyed
        );
    }
}

#[test]
fn shape_converts_to_and_from_call_shape() {
    for shape in [Shape::Unary, Shape::Stream] {
        assert_eq!(Shape::from(CallShape::from(shape)), shape);
    }
}

// ----- the contract as data -----

/// K1: the exact JSON of a small contract, so the format is pinned.
#[test]
fn k1_exact_json_of_a_small_contract() {
    let mut c = pump();
    c.services[0].methods.push(MethodContract {
        shape: Shape::Stream,
        ..method("levels", U)
    });
    c.services.push(ServiceContract {
        version: "2.1".to_owned(),
        execution: Some(ExecutionKind::Keyed),
        mailbox: 8,
        ..service("fleet", vec![])
    });
    c.normalize();
    let expected = r#"{
  "format": 1,
  "rid": "pump-1",
  "services": [
    {
      "channel": "fleet",
      "version": "2.1",
      "execution": "keyed",
      "mailbox": 8,
      "methods": []
    },
    {
      "channel": "pump",
      "version": "1",
      "execution": "default",
      "mailbox": 100,
      "methods": [
        {
          "name": "dispense",
          "semantics": "non-repeatable-command",
          "shape": "unary",
          "execution": "serial",
          "conflate": false
        },
        {
          "name": "levels",
          "semantics": "undeclared",
          "shape": "stream",
          "execution": "parallel",
          "conflate": false
        },
        {
          "name": "pressure",
          "semantics": "query",
          "shape": "unary",
          "execution": "parallel",
          "conflate": false
        },
        {
          "name": "set_setpoint",
          "semantics": "idempotent-command",
          "shape": "unary",
          "execution": "serial",
          "conflate": true
        }
      ]
    }
  ]
}"#;
    assert_eq!(c.to_json_pretty().ok().as_deref(), Some(expected));
    let back = NodeContract::from_json(expected).ok();
    assert_eq!(back, Some(c));
}

#[test]
fn k1_serde_round_trip() {
    let mut c = pump();
    c.services[0].execution = Some(ExecutionKind::Serial);
    c.services.push(service("b", vec![method("x", U)]));
    let json = c.to_json_pretty().expect("serialises");
    let back = NodeContract::from_json(&json).expect("reads back");
    assert_eq!(back, c);
}

#[test]
fn json_defaults_for_version_and_conflate() {
    let json = r#"{"format": 1, "rid": "a", "services": [{"channel": "c",
            "execution": "default", "mailbox": 3, "methods": [{"name": "m",
            "semantics": "query", "shape": "unary", "execution": "parallel"}]}]}"#;
    let c = NodeContract::from_json(json).ok();
    let s = c.as_ref().map(|c| &c.services[0]);
    assert_eq!(s.map(|s| s.version.as_str()), Some(DEFAULT_VERSION));
    assert_eq!(s.map(|s| s.methods[0].conflate), Some(false));
}

/// K1: two describes of the same node are byte-identical whatever the registration order.
#[test]
fn k1_normalize_makes_describe_byte_identical() {
    let mut a = pump();
    a.services
        .push(service("a", vec![method("z", Q), method("y", I)]));
    let mut b = a.clone();
    b.services.reverse();
    for s in &mut b.services {
        s.methods.reverse();
    }
    a.normalize();
    b.normalize();
    assert_eq!(a.to_json_pretty().ok(), b.to_json_pretty().ok());
    assert_eq!(a.services[0].channel, "a");
    assert_eq!(a.services[0].methods[0].name, "y");
}

#[test]
fn rejects_unsupported_format() {
    let json = r#"{"format": 2, "rid": "a", "services": [], "anything": 1}"#;
    assert!(matches!(
        NodeContract::from_json(json),
        Err(ContractError::UnsupportedFormat { found: 2 })
    ));
}

#[test]
fn rejects_malformed_json_unknown_fields_and_names() {
    for json in [
        "",
        "{",
        r#"{"format": 1}"#,
        r#"{"format": 1, "rid": "a", "services": [], "extra": true}"#,
        r#"{"format": 1, "rid": "a", "services": [{"channel": "c", "execution": "default",
                "mailbox": 1, "methods": [{"name": "m", "semantics": "safe", "shape": "unary",
                "execution": "parallel"}]}]}"#,
        r#"{"format": 1, "rid": "a", "services": [{"channel": "c", "execution": "sometimes",
                "mailbox": 1, "methods": []}]}"#,
    ] {
        assert!(
            matches!(NodeContract::from_json(json), Err(ContractError::Json(_))),
            "{json}"
        );
    }
}

#[test]
fn rejects_invalid_service_when_reading() {
    let mut c = pump_with("pressure", |m| m.conflate = true);
    c.normalize();
    let json = c.to_json_pretty().expect("serialises");
    assert!(matches!(
        NodeContract::from_json(&json),
        Err(ContractError::ConflateNotIdempotent { .. })
    ));
}

// ----- validation -----

#[test]
fn k4_valid_services_pass() {
    assert!(pump().validate().is_ok());
    let keyed = ServiceContract {
        execution: Some(ExecutionKind::Keyed),
        methods: vec![MethodContract {
            execution: ExecutionKind::Keyed,
            conflate: true,
            ..method("set", I)
        }],
        ..ServiceContract::new("x".repeat(NAME_MAX))
    };
    assert!(validate(&keyed).is_ok());
}

fn refused(edit: impl FnOnce(&mut ServiceContract)) -> ContractError {
    let mut s = pump().services.remove(0);
    edit(&mut s);
    match validate(&s) {
        Err(e) => e,
        Ok(()) => panic!("accepted {s:#?}"),
    }
}

#[test]
fn rejects_conflate_on_non_repeatable_command() {
    let e = refused(|s| s.methods[0].conflate = true);
    assert!(matches!(
        &e,
        ContractError::ConflateNotIdempotent { method, semantics: N, .. } if method == "dispense"
    ));
    assert!(e.to_string().contains(
        "dropping a queued non-repeatable command would skip work a caller was promised"
    ));
}

#[test]
fn rejects_conflate_on_query_and_undeclared() {
    for (i, semantics) in [(1, Q), (1, U)] {
        let e = refused(|s| {
            s.methods[i].semantics = semantics;
            s.methods[i].execution = ExecutionKind::Serial;
            s.methods[i].conflate = true;
        });
        assert!(
            matches!(&e, ContractError::ConflateNotIdempotent { semantics: s, .. } if *s == semantics)
        );
        assert!(e
            .to_string()
            .contains("Only an idempotent-command may conflate"));
    }
}

#[test]
fn rejects_conflate_on_parallel_execution() {
    let e = refused(|s| {
        s.execution = Some(ExecutionKind::Parallel);
        for m in &mut s.methods {
            m.execution = ExecutionKind::Parallel;
        }
    });
    assert!(
        matches!(&e, ContractError::ConflateParallel { method, .. } if method == "set_setpoint")
    );
    assert!(e.to_string().contains("nothing to conflate"));
}

#[test]
fn rejects_conflate_on_stream() {
    let e = refused(|s| s.methods[2].shape = Shape::Stream);
    assert!(matches!(&e, ContractError::ConflateStream { method, .. } if method == "set_setpoint"));
}

#[test]
fn rejects_zero_mailbox() {
    let e = refused(|s| s.mailbox = 0);
    assert!(matches!(e, ContractError::ZeroMailbox { .. }));
    assert!(e.to_string().contains("use at least 1"));
}

#[test]
fn rejects_empty_channel() {
    assert!(matches!(
        refused(|s| s.channel.clear()),
        ContractError::EmptyChannel
    ));
}

#[test]
fn rejects_channel_over_255_bytes() {
    // 128 two-byte characters: 256 bytes, 128 chars (the bound is in bytes).
    let e = refused(|s| s.channel = "é".repeat(128));
    assert!(matches!(e, ContractError::ChannelTooLong { len: 256, .. }));
}

#[test]
fn rejects_empty_method_name() {
    assert!(matches!(
        refused(|s| s.methods[1].name.clear()),
        ContractError::EmptyMethodName { .. }
    ));
}

#[test]
fn rejects_method_name_over_255_bytes() {
    let e = refused(|s| s.methods[1].name = "m".repeat(NAME_MAX + 1));
    assert!(matches!(
        e,
        ContractError::MethodNameTooLong { len: 256, .. }
    ));
}

#[test]
fn rejects_duplicate_method_names() {
    let e = refused(|s| s.methods[1].name = "dispense".to_owned());
    assert!(matches!(&e, ContractError::DuplicateMethod { method, .. } if method == "dispense"));
}

#[test]
fn rejects_reserved_dollar_method_name() {
    let e = refused(|s| s.methods[1].name = "$describe".to_owned());
    assert!(matches!(e, ContractError::ReservedMethodName { .. }));
    assert!(e.to_string().contains("reserved for built-in methods"));
}

#[test]
fn rejects_duplicate_channels() {
    let mut c = pump();
    c.services.push(service("pump", vec![]));
    assert!(matches!(
        c.validate(),
        Err(ContractError::DuplicateChannel { .. })
    ));
}

// ----- the check: one test per row of the table -----

#[test]
fn k1_check_identical_contracts_report_nothing() {
    assert!(check(&pump(), &pump()).changes.is_empty());
}

/// K1 table row `service-removed`: breaking.
#[test]
fn k1_check_service_removed_is_breaking() {
    let report = check(&pump(), &node(vec![]));
    let c = only(&report);
    assert_eq!((&c.kind, c.breaking), (&ChangeKind::ServiceRemoved, true));
    assert_eq!((c.channel.as_str(), c.method.as_deref()), ("pump", None));
    assert!(report.is_breaking());
}

/// K1 table row `service-added`: not breaking.
#[test]
fn k1_check_service_added_is_not_breaking() {
    let report = check(&node(vec![]), &pump());
    let c = only(&report);
    assert_eq!((&c.kind, c.breaking), (&ChangeKind::ServiceAdded, false));
    assert!(!report.is_breaking());
}

/// K1 table row `method-removed`: breaking.
#[test]
fn k1_check_method_removed_is_breaking() {
    let mut new = pump();
    new.services[0].methods.remove(0);
    let report = check(&pump(), &new);
    let c = only(&report);
    assert_eq!((&c.kind, c.breaking), (&ChangeKind::MethodRemoved, true));
    assert_eq!(c.method.as_deref(), Some("dispense"));
}

/// K1 table row `method-added`: not breaking.
#[test]
fn k1_check_method_added_is_not_breaking() {
    let mut new = pump();
    new.services[0].methods.push(method("flush", N));
    let report = check(&pump(), &new);
    let c = only(&report);
    assert_eq!((&c.kind, c.breaking), (&ChangeKind::MethodAdded, false));
    assert_eq!(c.method.as_deref(), Some("flush"));
}

/// K1 table row `more-dangerous`: every move up the danger order is breaking, including
/// any declared semantics becoming undeclared; and `less-dangerous`: every move down is
/// not, including undeclared becoming declared.
#[test]
fn k1_check_more_dangerous_is_breaking_and_less_dangerous_is_not() {
    for from in ALL {
        for to in ALL {
            if from == to {
                continue;
            }
            let old = node(vec![service("s", vec![method("m", from)])]);
            let new = node(vec![service("s", vec![method("m", to)])]);
            let report = check(&old, &new);
            let sem = &report.changes[0];
            if danger(to) > danger(from) {
                assert_eq!(sem.kind, ChangeKind::MoreDangerous { from, to });
                assert!(sem.breaking && report.is_breaking());
            } else {
                assert_eq!(sem.kind, ChangeKind::LessDangerous { from, to });
                assert!(!sem.breaking);
            }
            // The only other possible change is the graded default execution.
            for other in &report.changes[1..] {
                assert!(matches!(other.kind, ChangeKind::ExecutionChanged { .. }));
            }
        }
    }
}

/// K1: the seed's example, query -> idempotent-command, names both in the detail.
#[test]
fn k1_check_more_dangerous_detail_names_both_semantics() {
    let new = pump_with("pressure", |m| {
        m.semantics = I;
        m.execution = ExecutionKind::Serial;
    });
    let report = check(&pump(), &new);
    let c = &report.changes[0];
    assert_eq!(c.method.as_deref(), Some("pressure"));
    assert!(c.detail.starts_with("query -> idempotent-command"), "{c:?}");
}

/// K1 table row `shape-changed`: breaking both ways.
#[test]
fn k1_check_shape_changed_is_breaking() {
    let new = pump_with("pressure", |m| m.shape = Shape::Stream);
    let c = only(&check(&pump(), &new)).clone();
    let expected = ChangeKind::ShapeChanged {
        from: Shape::Unary,
        to: Shape::Stream,
    };
    assert_eq!((c.kind, c.breaking), (expected, true));
    assert!(check(&new, &pump()).is_breaking());
}

/// K1 table row `execution-changed`: reported, not breaking, both ways.
#[test]
fn k1_check_execution_changed_is_not_breaking() {
    let new = pump_with("pressure", |m| m.execution = ExecutionKind::Serial);
    let c = only(&check(&pump(), &new)).clone();
    let expected = ChangeKind::ExecutionChanged {
        from: ExecutionKind::Parallel,
        to: ExecutionKind::Serial,
    };
    assert_eq!((c.kind, c.breaking), (expected, false));
    assert!(!check(&new, &pump()).is_breaking());
}

/// K1 table rows `conflate-changed`: breaking when turned on, not when turned off.
#[test]
fn k1_check_conflate_on_is_breaking_off_is_not() {
    let off = pump_with("set_setpoint", |m| m.conflate = false);
    let on = check(&off, &pump());
    let c = only(&on);
    assert_eq!(
        (&c.kind, c.breaking),
        (
            &ChangeKind::ConflateChanged {
                from: false,
                to: true
            },
            true
        )
    );
    let turned_off = check(&pump(), &off);
    let c = only(&turned_off);
    assert_eq!(
        (&c.kind, c.breaking),
        (
            &ChangeKind::ConflateChanged {
                from: true,
                to: false
            },
            false
        )
    );
}

/// K1 table row `mailbox-changed`: not breaking.
#[test]
fn k1_check_mailbox_changed_is_not_breaking() {
    let mut new = pump();
    new.services[0].mailbox = 5;
    let report = check(&pump(), &new);
    let c = only(&report);
    assert_eq!(
        (&c.kind, c.breaking, c.method.as_deref()),
        (
            &ChangeKind::MailboxChanged { from: 100, to: 5 },
            false,
            None
        )
    );
}

/// K1 table row `version-changed`: informational.
#[test]
fn k1_check_version_changed_is_informational() {
    let mut new = pump();
    new.services[0].version = "2".to_owned();
    let report = check(&pump(), &new);
    let c = only(&report);
    assert_eq!(
        (&c.kind, c.breaking),
        (
            &ChangeKind::VersionChanged {
                from: "1".to_owned(),
                to: "2".to_owned()
            },
            false
        )
    );
}

/// K1: the check ignores the RID and the order of services and methods.
#[test]
fn k1_check_ignores_rid_and_order() {
    let mut new = pump();
    new.rid = "pump-2".to_owned();
    new.services[0].methods.reverse();
    assert!(check(&pump(), &new).changes.is_empty());
}

/// K1: changes come out by channel, service-level first, then by method name.
#[test]
fn k1_check_orders_changes() {
    let old = node(vec![
        service("b", vec![method("z", Q), method("a", Q)]),
        service("a", vec![]),
    ]);
    let mut new = node(vec![
        service("b", vec![method("y", Q)]),
        service("c", vec![]),
    ]);
    new.services[0].version = "2".to_owned();
    let report = check(&old, &new);
    let rows: Vec<(&str, Option<&str>, &str)> = report
        .changes
        .iter()
        .map(|c| (c.channel.as_str(), c.method.as_deref(), c.kind.as_str()))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("a", None, "service-removed"),
            ("b", None, "version-changed"),
            ("b", Some("a"), "method-removed"),
            ("b", Some("y"), "method-added"),
            ("b", Some("z"), "method-removed"),
            ("c", None, "service-added"),
        ]
    );
}

/// K1: the report's JSON carries the kind inline, and reads back.
#[test]
fn k1_check_report_json() {
    let new = pump_with("pressure", |m| m.semantics = N);
    let report = check(&pump(), &new);
    let value = serde_json::to_value(&report).ok();
    let first = value.as_ref().map(|v| &v["changes"][0]);
    assert_eq!(
        first.map(|c| (&c["change"], &c["from"], &c["to"], &c["breaking"])),
        Some((
            &serde_json::json!("more-dangerous"),
            &serde_json::json!("query"),
            &serde_json::json!("non-repeatable-command"),
            &serde_json::json!(true),
        ))
    );
    let back: Option<CheckReport> = serde_json::to_string(&report)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    assert_eq!(back, Some(report));
}

/// K1: `ChangeKind::as_str` (the table's CHANGE column) is the JSON `change` tag.
#[test]
fn k1_change_kind_names_match_json_tags() {
    let kinds = [
        ChangeKind::ServiceRemoved,
        ChangeKind::ServiceAdded,
        ChangeKind::MethodRemoved,
        ChangeKind::MethodAdded,
        ChangeKind::MoreDangerous { from: Q, to: U },
        ChangeKind::LessDangerous { from: U, to: Q },
        ChangeKind::ShapeChanged {
            from: Shape::Unary,
            to: Shape::Stream,
        },
        ChangeKind::ExecutionChanged {
            from: ExecutionKind::Serial,
            to: ExecutionKind::Keyed,
        },
        ChangeKind::ConflateChanged {
            from: false,
            to: true,
        },
        ChangeKind::MailboxChanged { from: 1, to: 2 },
        ChangeKind::VersionChanged {
            from: "1".to_owned(),
            to: "2".to_owned(),
        },
    ];
    for kind in kinds {
        let json = serde_json::to_value(&kind).expect("serialises");
        assert_eq!(json["change"], kind.as_str());
        let back: ChangeKind = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, kind);
    }
}

// ----- properties -----

/// Recomputes each method's effective execution and drops conflate where it is invalid,
/// so a generated contract is one a node could expose.
fn refresh(service: &mut ServiceContract) {
    for m in &mut service.methods {
        m.execution = effective_execution(service.execution, m.semantics);
        m.conflate &=
            m.semantics == I && m.shape == Shape::Unary && m.execution != ExecutionKind::Parallel;
    }
}

fn arb_semantics() -> impl Strategy<Value = Option<Semantics>> {
    prop::sample::select(ALL.to_vec())
}

fn arb_service_execution() -> impl Strategy<Value = Option<ExecutionKind>> {
    prop::sample::select(vec![
        None,
        Some(ExecutionKind::Parallel),
        Some(ExecutionKind::Serial),
        Some(ExecutionKind::Keyed),
    ])
}

fn arb_service(channel: String) -> impl Strategy<Value = ServiceContract> {
    let arb_method = (arb_semantics(), any::<bool>(), any::<bool>());
    (
        arb_service_execution(),
        1usize..=200,
        prop::collection::vec(arb_method, 1..6),
    )
        .prop_map(move |(execution, mailbox, methods)| {
            let mut s = ServiceContract {
                execution,
                mailbox,
                methods: methods
                    .into_iter()
                    .enumerate()
                    .map(|(i, (semantics, stream, conflate))| MethodContract {
                        shape: if stream { Shape::Stream } else { Shape::Unary },
                        conflate,
                        ..method(&format!("m{i}"), semantics)
                    })
                    .collect(),
                ..ServiceContract::new(channel.clone())
            };
            refresh(&mut s);
            s
        })
}

fn arb_node() -> impl Strategy<Value = NodeContract> {
    (1usize..4)
        .prop_flat_map(|n| {
            (0..n)
                .map(|i| arb_service(format!("c{i}")))
                .collect::<Vec<_>>()
        })
        .prop_map(node)
}

proptest! {
    /// K1: a contract checked against itself, in any order, is never breaking.
    #[test]
    fn k1_prop_check_of_itself_is_never_breaking(a in arb_node()) {
        prop_assert!(a.validate().is_ok());
        let report = check(&a, &a);
        prop_assert!(!report.is_breaking());
        prop_assert!(report.changes.is_empty());
        let mut shuffled = a.clone();
        shuffled.services.reverse();
        for s in &mut shuffled.services {
            s.methods.reverse();
        }
        prop_assert!(check(&a, &shuffled).changes.is_empty());
    }

    /// K1: one method made more dangerous to repeat (and nothing else but what follows from
    /// it: the graded execution, a conflate that is no longer allowed) is always breaking,
    /// and the report says which method.
    #[test]
    fn k1_prop_one_method_more_dangerous_is_always_breaking(
        a in arb_node(),
        which_service in any::<prop::sample::Index>(),
        which_method in any::<prop::sample::Index>(),
        from_rank in 0usize..3,
        step in any::<prop::sample::Index>(),
    ) {
        let mut old = a;
        let si = which_service.index(old.services.len());
        let mi = which_method.index(old.services[si].methods.len());
        let to_rank = from_rank + 1 + step.index(3 - from_rank);
        old.services[si].methods[mi].semantics = ALL[from_rank];
        refresh(&mut old.services[si]);
        let mut new = old.clone();
        new.services[si].methods[mi].semantics = ALL[to_rank];
        refresh(&mut new.services[si]);
        prop_assert!(new.validate().is_ok());

        let report = check(&old, &new);
        prop_assert!(report.is_breaking());
        let name = &old.services[si].methods[mi].name;
        let breaking: Vec<&Change> = report.breaking().collect();
        prop_assert_eq!(breaking.len(), 1);
        prop_assert_eq!(breaking[0].method.as_ref(), Some(name));
        prop_assert_eq!(
            &breaking[0].kind,
            &ChangeKind::MoreDangerous { from: ALL[from_rank], to: ALL[to_rank] }
        );
    }
}
