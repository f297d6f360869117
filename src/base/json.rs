//! `json!`: serde_json's macro, same grammar and same values, with a smaller expansion.
//!
//! serde_json's `json!` inlines, for every key of every object, the key's allocation and copy,
//! a `BTreeMap` insert and the drop of what it returns, and for every value an `unwrap` with its
//! own panic location. With about 800 objects built in this crate that was 205 KB of the static
//! binary (measured: 4,252,256 bytes before, 4,047,456 after), which has a size budget. Here a
//! key is one call to [`put`] and a value one call to [`to`], shared by every site. Building an
//! object is never on the per-delta path (`events::chunk_frame` writes deltas by hand), so the
//! calls cost nothing measurable.
//!
//! The grammar is serde_json's (`macros.rs`, MIT OR Apache-2.0), with only those two changes.
//! A leaf: it uses no other module of this crate.

use serde::Serialize;
use serde_json::{Map, Value};

/// One key of an object being built: out of line, so each site is a call.
#[inline(never)]
pub(crate) fn put<K: Into<String>>(object: &mut Map<String, Value>, key: K, value: Value) {
    object.insert(key.into(), value);
}

/// One value of any `Serialize` type, as `serde_json::to_value(..).unwrap()` (which fails only
/// for maps whose keys are not strings, which this crate never builds).
#[inline(never)]
pub(crate) fn to<T: Serialize + ?Sized>(value: &T) -> Value {
    serde_json::to_value(value).expect("a JSON value")
}

/// Builds a `serde_json::Value` from JSON-like syntax, as `serde_json::json!` does.
macro_rules! json {
    // Hide distracting implementation details from the generated rustdoc.
    ($($json:tt)+) => {
        $crate::base::json::json_internal!($($json)+)
    };
}

macro_rules! json_internal {
    //////////////////////////////////////////////////////////////////////////
    // TT muncher for parsing the inside of an array [...]. Produces a vec![...]
    // of the elements.
    //
    // Must be invoked as: json_internal!(@array [] $($tt)*)
    //////////////////////////////////////////////////////////////////////////

    // Done with trailing comma.
    (@array [$($elems:expr,)*]) => {
        ::std::vec![$($elems,)*]
    };

    // Done without trailing comma.
    (@array [$($elems:expr),*]) => {
        ::std::vec![$($elems),*]
    };

    // Next element is `null`.
    (@array [$($elems:expr,)*] null $($rest:tt)*) => {
        $crate::base::json::json_internal!(@array [$($elems,)* $crate::base::json::json_internal!(null)] $($rest)*)
    };

    // Next element is `true`.
    (@array [$($elems:expr,)*] true $($rest:tt)*) => {
        $crate::base::json::json_internal!(@array [$($elems,)* $crate::base::json::json_internal!(true)] $($rest)*)
    };

    // Next element is `false`.
    (@array [$($elems:expr,)*] false $($rest:tt)*) => {
        $crate::base::json::json_internal!(@array [$($elems,)* $crate::base::json::json_internal!(false)] $($rest)*)
    };

    // Next element is an array.
    (@array [$($elems:expr,)*] [$($array:tt)*] $($rest:tt)*) => {
        $crate::base::json::json_internal!(@array [$($elems,)* $crate::base::json::json_internal!([$($array)*])] $($rest)*)
    };

    // Next element is a map.
    (@array [$($elems:expr,)*] {$($map:tt)*} $($rest:tt)*) => {
        $crate::base::json::json_internal!(@array [$($elems,)* $crate::base::json::json_internal!({$($map)*})] $($rest)*)
    };

    // Next element is an expression followed by comma.
    (@array [$($elems:expr,)*] $next:expr, $($rest:tt)*) => {
        $crate::base::json::json_internal!(@array [$($elems,)* $crate::base::json::json_internal!($next),] $($rest)*)
    };

    // Last element is an expression with no trailing comma.
    (@array [$($elems:expr,)*] $last:expr) => {
        $crate::base::json::json_internal!(@array [$($elems,)* $crate::base::json::json_internal!($last)])
    };

    // Comma after the most recent element.
    (@array [$($elems:expr),*] , $($rest:tt)*) => {
        $crate::base::json::json_internal!(@array [$($elems,)*] $($rest)*)
    };

    // Unexpected token after most recent element.
    (@array [$($elems:expr),*] $unexpected:tt $($rest:tt)*) => {
        $crate::base::json::json_unexpected!($unexpected)
    };

    //////////////////////////////////////////////////////////////////////////
    // TT muncher for parsing the inside of an object {...}. Each entry is
    // inserted into the given map variable.
    //
    // Must be invoked as: json_internal!(@object $map () ($($tt)*) ($($tt)*))
    //
    // We require two copies of the input tokens so that we can match on one
    // copy and trigger errors on the other copy.
    //////////////////////////////////////////////////////////////////////////

    // Done.
    (@object $object:ident () () ()) => {};

    // Insert the current entry followed by trailing comma.
    (@object $object:ident [$($key:tt)+] ($value:expr) , $($rest:tt)*) => {
        $crate::base::json::put(&mut $object, $($key)+, $value);
        $crate::base::json::json_internal!(@object $object () ($($rest)*) ($($rest)*));
    };

    // Current entry followed by unexpected token.
    (@object $object:ident [$($key:tt)+] ($value:expr) $unexpected:tt $($rest:tt)*) => {
        $crate::base::json::json_unexpected!($unexpected);
    };

    // Insert the last entry without trailing comma.
    (@object $object:ident [$($key:tt)+] ($value:expr)) => {
        $crate::base::json::put(&mut $object, $($key)+, $value);
    };

    // Next value is `null`.
    (@object $object:ident ($($key:tt)+) (: null $($rest:tt)*) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object [$($key)+] ($crate::base::json::json_internal!(null)) $($rest)*);
    };

    // Next value is `true`.
    (@object $object:ident ($($key:tt)+) (: true $($rest:tt)*) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object [$($key)+] ($crate::base::json::json_internal!(true)) $($rest)*);
    };

    // Next value is `false`.
    (@object $object:ident ($($key:tt)+) (: false $($rest:tt)*) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object [$($key)+] ($crate::base::json::json_internal!(false)) $($rest)*);
    };

    // Next value is an array.
    (@object $object:ident ($($key:tt)+) (: [$($array:tt)*] $($rest:tt)*) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object [$($key)+] ($crate::base::json::json_internal!([$($array)*])) $($rest)*);
    };

    // Next value is a map.
    (@object $object:ident ($($key:tt)+) (: {$($map:tt)*} $($rest:tt)*) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object [$($key)+] ($crate::base::json::json_internal!({$($map)*})) $($rest)*);
    };

    // Next value is an expression followed by comma.
    (@object $object:ident ($($key:tt)+) (: $value:expr , $($rest:tt)*) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object [$($key)+] ($crate::base::json::json_internal!($value)) , $($rest)*);
    };

    // Last value is an expression with no trailing comma.
    (@object $object:ident ($($key:tt)+) (: $value:expr) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object [$($key)+] ($crate::base::json::json_internal!($value)));
    };

    // Missing value for last entry. Trigger a reasonable error message.
    (@object $object:ident ($($key:tt)+) (:) $copy:tt) => {
        // "unexpected end of macro invocation"
        $crate::base::json::json_internal!();
    };

    // Missing colon and value for last entry. Trigger a reasonable error
    // message.
    (@object $object:ident ($($key:tt)+) () $copy:tt) => {
        // "unexpected end of macro invocation"
        $crate::base::json::json_internal!();
    };

    // Misplaced colon. Trigger a reasonable error message.
    (@object $object:ident () (: $($rest:tt)*) ($colon:tt $($copy:tt)*)) => {
        // Takes no arguments so "no rules expected the token `:`".
        $crate::base::json::json_unexpected!($colon);
    };

    // Found a comma inside a key. Trigger a reasonable error message.
    (@object $object:ident ($($key:tt)*) (, $($rest:tt)*) ($comma:tt $($copy:tt)*)) => {
        // Takes no arguments so "no rules expected the token `,`".
        $crate::base::json::json_unexpected!($comma);
    };

    // Key is fully parenthesized. This avoids clippy double_parens false
    // positives because the parenthesization may be necessary here.
    (@object $object:ident () (($key:expr) : $($rest:tt)*) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object ($key) (: $($rest)*) (: $($rest)*));
    };

    // Refuse to absorb colon token into key expression.
    (@object $object:ident ($($key:tt)*) (: $($unexpected:tt)+) $copy:tt) => {
        $crate::base::json::json_expect_expr_comma!($($unexpected)+);
    };

    // Munch a token into the current key.
    (@object $object:ident ($($key:tt)*) ($tt:tt $($rest:tt)*) $copy:tt) => {
        $crate::base::json::json_internal!(@object $object ($($key)* $tt) ($($rest)*) ($($rest)*));
    };

    //////////////////////////////////////////////////////////////////////////
    // The main implementation.
    //
    // Must be invoked as: json_internal!($($json)+)
    //////////////////////////////////////////////////////////////////////////

    (null) => {
        ::serde_json::Value::Null
    };

    (true) => {
        ::serde_json::Value::Bool(true)
    };

    (false) => {
        ::serde_json::Value::Bool(false)
    };

    ([]) => {
        ::serde_json::Value::Array(::std::vec![])
    };

    ([ $($tt:tt)+ ]) => {
        ::serde_json::Value::Array($crate::base::json::json_internal!(@array [] $($tt)+))
    };

    ({}) => {
        ::serde_json::Value::Object(::serde_json::Map::new())
    };

    ({ $($tt:tt)+ }) => {
        ::serde_json::Value::Object({
            let mut object = ::serde_json::Map::new();
            $crate::base::json::json_internal!(@object object () ($($tt)+) ($($tt)+));
            object
        })
    };

    // Any Serialize type: numbers, strings, struct literals, variables etc.
    // Must be below every other rule.
    ($other:expr) => {
        $crate::base::json::to(&$other)
    };
}

// The next two only name the token in the error of a malformed invocation.
#[allow(unused_macros)]
macro_rules! json_unexpected {
    () => {};
}

#[allow(unused_macros)]
macro_rules! json_expect_expr_comma {
    ($e:expr , $($tt:tt)*) => {};
}

pub(crate) use {json, json_internal};
#[allow(unused_imports)]
pub(crate) use {json_expect_expr_comma, json_unexpected};

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// Every form of the grammar builds what serde_json's macro builds.
    #[test]
    fn builds_what_serde_json_builds() {
        let name = String::from("n");
        let opt: Option<u32> = None;
        let list = vec!["a", "b"];
        let nested = serde_json::json!({"k": [1, 2]});
        let cases: Vec<(Value, Value)> = vec![
            (json!(null), serde_json::json!(null)),
            (json!(true), serde_json::json!(true)),
            (json!([]), serde_json::json!([])),
            (json!({}), serde_json::json!({})),
            (json!(1.5), serde_json::json!(1.5)),
            (json!("s"), serde_json::json!("s")),
            (
                json!({"a": 1, "b": [true, null, {"c": "d"}], "e": {}, name.clone(): opt, "l": list}),
                serde_json::json!({"a": 1, "b": [true, null, {"c": "d"}], "e": {}, name.clone(): opt, "l": list}),
            ),
            (
                json!([nested, 2, "x",]),
                serde_json::json!([nested, 2, "x",]),
            ),
            (
                json!({("k".to_owned()): -3, "t": false,}),
                serde_json::json!({("k".to_owned()): -3, "t": false,}),
            ),
        ];
        for (ours, theirs) in cases {
            assert_eq!(ours, theirs);
        }
        // A later duplicate key wins, as in serde_json.
        assert_eq!(json!({"a": 1, "a": 2}), serde_json::json!({"a": 2}));
    }
}
