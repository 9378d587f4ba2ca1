//! What a `#[service]` trait declares, read and checked: every input the macro refuses is a
//! [`syn::Error`] spanned at the offending tokens, so the compiler points at them.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, ItemTrait, LitInt, LitStr, Pat, PathArguments,
    ReturnType, Signature, TraitItem, TraitItemFn, Type,
};

/// The longest channel name the wire carries (WIRE.md: names are 1..=255 bytes).
const NAME_MAX: usize = 255;

/// Names the generated trait and client already use; a method may not take them.
const TRAIT_RESERVED: [&str; 2] = ["into_service", "contract"];
const CLIENT_RESERVED: [&str; 5] = ["new", "ready", "contract", "to_peer", "node"];

/// A service trait, read and checked.
pub(crate) struct Service {
    /// The trait as written, minus the method attributes the macro consumes.
    pub item: ItemTrait,
    pub channel: String,
    pub version: String,
    pub execution: Option<Execution>,
    pub mailbox: Option<usize>,
    pub methods: Vec<Method>,
}

/// `execution = ..` on the trait.
pub(crate) enum Execution {
    Serial,
    Parallel,
    /// Keyed by the argument of this name, which every method has.
    Keyed(Ident),
}

/// A method's declared semantics (`None` in [`Method::semantics`]: undeclared).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Semantics {
    Query,
    Idempotent,
    NonRepeatable,
}

/// One method of the trait.
pub(crate) struct Method {
    pub name: Ident,
    pub docs: Vec<Attribute>,
    pub semantics: Option<Semantics>,
    pub conflate: bool,
    /// The position of the request context among the arguments, if it takes one.
    pub context: Option<usize>,
    /// The item type of a streaming method (an `Items<T>` argument).
    pub stream: Option<Type>,
    /// The call's arguments, context excluded, in order.
    pub args: Vec<(Ident, Type)>,
    /// Every argument as declared (context included), for the call into the implementation.
    pub params: Vec<Param>,
    pub output: Output,
}

/// One declared argument of a method, in order.
pub(crate) enum Param {
    Context,
    Items,
    Arg(Ident),
}

/// What a method returns.
pub(crate) enum Output {
    /// A value (`()` when nothing is written).
    Value(Type),
    /// `Result<T, E>`: `T` is the result, `E` becomes the call's error (`Into<ServeError>`).
    Result(Type),
}

impl Output {
    /// The type a caller receives on success.
    pub fn ok_type(&self) -> &Type {
        match self {
            Output::Value(t) | Output::Result(t) => t,
        }
    }
}

/// Collects errors so that one expansion reports every problem it found.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    /// An error spanning all of `tokens` (first to last token, on stable too).
    fn on(&mut self, tokens: &impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Service {
    /// Reads `#[service(attr)] item`.
    pub fn parse(attr: TokenStream, item: TokenStream) -> syn::Result<Service> {
        let is_trait = is_trait(&item);
        let mut item: ItemTrait = syn::parse2(item).map_err(|e| {
            if is_trait {
                // A trait syn cannot read: its own message points at the tokens.
                e
            } else {
                syn::Error::new(
                    e.span(),
                    "#[zmesh::service] goes on a trait: `trait Pump { async fn pressure(&self) -> f64; }`",
                )
            }
        })?;
        let mut errors = Errors::default();
        let keys = parse_keys(attr, &mut errors);
        let channel = match keys.channel {
            Some(c) => c,
            None => {
                errors.at(
                    Span::call_site(),
                    "#[zmesh::service] needs `channel = \"..\"`: the channel callers name",
                );
                String::new()
            }
        };
        if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
            errors.on(
                &item.generics,
                "a service trait cannot be generic: its types are the wire contract",
            );
        }
        if let Some(u) = &item.unsafety {
            errors.on(u, "a service trait cannot be `unsafe`");
        }
        let mut methods = Vec::new();
        for trait_item in &mut item.items {
            match trait_item {
                TraitItem::Fn(f) => {
                    if let Some(m) = read_method(f, &mut errors) {
                        methods.push(m);
                    }
                }
                other => errors.on(
                    other,
                    "a service trait holds only `async fn` methods (no consts, types or macros)",
                ),
            }
        }
        if let Some(Execution::Keyed(key)) = &keys.execution {
            for m in &methods {
                if !m.args.iter().any(|(name, _)| name == key) {
                    errors.on(
                        &m.name,
                        format!(
                            "`execution = keyed({key})`: method `{}` has no argument `{key}`; \
                             every method of a keyed service names its queue by that argument",
                            m.name
                        ),
                    );
                }
            }
        }
        if let Some(Execution::Parallel) = &keys.execution {
            for m in methods.iter().filter(|m| m.conflate) {
                errors.on(
                    &m.name,
                    format!(
                        "method `{}` conflates, but `execution = parallel` runs every call at \
                         once: no call ever waits to be replaced; use serial or keyed execution",
                        m.name
                    ),
                );
            }
        }
        errors.finish()?;
        Ok(Service {
            item,
            channel,
            version: keys.version.unwrap_or_else(|| "1".to_owned()),
            execution: keys.execution,
            mailbox: keys.mailbox,
            methods,
        })
    }
}

/// True when `item` declares a trait: the keyword `trait` comes before its body.
fn is_trait(item: &TokenStream) -> bool {
    item.clone()
        .into_iter()
        .take_while(|t| !matches!(t, proc_macro2::TokenTree::Group(g) if g.delimiter() == proc_macro2::Delimiter::Brace))
        .any(|t| matches!(&t, proc_macro2::TokenTree::Ident(i) if i == "trait"))
}

/// The keys of `#[service(..)]`.
#[derive(Default)]
struct Keys {
    channel: Option<String>,
    version: Option<String>,
    execution: Option<Execution>,
    mailbox: Option<usize>,
}

fn parse_keys(attr: TokenStream, errors: &mut Errors) -> Keys {
    let mut keys = Keys::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("channel") {
            let lit: LitStr = meta.value()?.parse()?;
            let c = lit.value();
            let refused = c.is_empty() || c.len() > NAME_MAX;
            // Named, if refused: the one error is its length, not a missing channel.
            keys.channel = Some(c);
            if refused {
                return Err(syn::Error::new(
                    lit.span(),
                    format!("a channel name is 1..={NAME_MAX} bytes"),
                ));
            }
        } else if meta.path.is_ident("version") {
            let value = meta.value()?;
            let version = if value.peek(LitStr) {
                value.parse::<LitStr>()?.value()
            } else {
                value.parse::<LitInt>()?.base10_digits().to_owned()
            };
            keys.version = Some(version);
        } else if meta.path.is_ident("mailbox") {
            let lit: LitInt = meta.value()?.parse()?;
            let n: usize = lit.base10_parse()?;
            if n == 0 {
                return Err(syn::Error::new(
                    lit.span(),
                    "a mailbox of 0 would refuse every call that has to wait; at least 1",
                ));
            }
            keys.mailbox = Some(n);
        } else if meta.path.is_ident("execution") {
            let value = meta.value()?;
            let kind: Ident = value.parse()?;
            keys.execution = Some(match kind.to_string().as_str() {
                "serial" => Execution::Serial,
                "parallel" => Execution::Parallel,
                "keyed" => {
                    let content;
                    syn::parenthesized!(content in value);
                    let key: Ident = content.parse().map_err(|e| {
                        syn::Error::new(e.span(), "`keyed(..)` names an argument: `keyed(device)`")
                    })?;
                    Execution::Keyed(key)
                }
                _ => {
                    return Err(syn::Error::new(
                        kind.span(),
                        "execution is `serial`, `parallel` or `keyed(argument)`",
                    ))
                }
            });
        } else {
            return Err(meta.error(
                "unknown key: #[zmesh::service] takes `channel`, `version`, `execution` and `mailbox`",
            ));
        }
        Ok(())
    });
    if let Err(e) = parser.parse2(attr) {
        errors.push(e);
    }
    keys
}

/// Reads one method and strips the attributes the macro consumes; `None` when it is refused.
fn read_method(f: &mut TraitItemFn, errors: &mut Errors) -> Option<Method> {
    let before = errors.0.is_some();
    let name = f.sig.ident.clone();
    let (semantics, conflate) = take_semantics(&mut f.attrs, errors);
    check_signature(f, &name, errors);
    let sig = &f.sig;
    let mut inputs = sig.inputs.iter();
    check_receiver(inputs.next(), sig, &name, errors);
    let Params {
        context,
        stream,
        args,
        params,
    } = read_params(inputs, &name, conflate, errors);
    let output = read_output(sig, &name, errors);
    if errors.0.is_some() && !before {
        return None;
    }
    let docs = f
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .cloned()
        .collect();
    Some(Method {
        name,
        docs,
        semantics,
        conflate,
        context,
        stream,
        args,
        params,
        output,
    })
}

/// Refuses what a service method's signature cannot be: not `async`, generic, `const`,
/// `unsafe`, with an ABI, variadic, with a body in the trait, or named as a generated item.
fn check_signature(f: &TraitItemFn, name: &Ident, errors: &mut Errors) {
    let sig = &f.sig;
    if sig.asyncness.is_none() {
        errors.on(
            sig,
            format!("service method `{name}` must be an `async fn`: a call is awaited"),
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.on(
            &sig.generics,
            format!(
                "service method `{name}` cannot be generic: its argument and result types are \
                 the wire contract"
            ),
        );
    }
    if let Some(c) = &sig.constness {
        errors.on(c, "a service method cannot be `const`");
    }
    if let Some(u) = &sig.unsafety {
        errors.on(u, "a service method cannot be `unsafe`");
    }
    if let Some(a) = &sig.abi {
        errors.on(a, "a service method cannot declare an ABI");
    }
    if let Some(v) = &sig.variadic {
        errors.on(v, "a service method cannot be variadic");
    }
    if let Some(body) = &f.default {
        errors.on(
            body,
            format!(
                "service method `{name}` has no body in the trait: implement it in an `impl` of \
                 the trait"
            ),
        );
    }
    let reserved_trait = TRAIT_RESERVED.contains(&name.to_string().as_str());
    let reserved_client = CLIENT_RESERVED.contains(&name.to_string().as_str());
    if reserved_trait || reserved_client {
        errors.on(
            &name,
            format!(
                "method name `{name}` is taken by the generated {}",
                if reserved_trait { "trait" } else { "client" }
            ),
        );
    }
}

/// Refuses a method whose first input is not `&self`.
fn check_receiver(first: Option<&FnArg>, sig: &Signature, name: &Ident, errors: &mut Errors) {
    match first {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
        Some(other) => errors.on(
            other,
            format!(
                "service method `{name}` takes `&self`: calls run concurrently on one shared \
                 implementation"
            ),
        ),
        None => errors.at(
            sig.paren_token.span.join(),
            format!("service method `{name}` takes `&self` first"),
        ),
    }
}

/// A method's inputs after `&self`, as [`read_params`] reads them.
struct Params {
    /// The position of the request context among them, if any.
    context: Option<usize>,
    /// The item type of an `Items<T>` input, if any.
    stream: Option<Type>,
    /// The call's arguments, in order.
    args: Vec<(Ident, Type)>,
    /// Every input as declared.
    params: Vec<Param>,
}

/// Reads a method's inputs after `&self`: at most one `Context` and one `Items<T>` (not in a
/// conflating method), the rest plain, owned arguments.
fn read_params<'a>(
    inputs: impl Iterator<Item = &'a FnArg>,
    name: &Ident,
    conflate: bool,
    errors: &mut Errors,
) -> Params {
    let mut context = None;
    let mut stream = None;
    let mut args = Vec::new();
    let mut params = Vec::new();
    for (i, input) in inputs.enumerate() {
        let FnArg::Typed(pt) = input else {
            errors.on(input, "`self` comes first, once");
            continue;
        };
        if let Some(item) = items_type(&pt.ty) {
            if stream.is_some() {
                errors.on(&pt.ty, "a service method takes at most one `Items<T>`");
            }
            if conflate {
                errors.on(
                    &pt.ty,
                    format!(
                        "method `{name}` conflates but streams: a replaced stream's caller would \
                         lose items it was promised; conflate only unary idempotent commands"
                    ),
                );
            }
            stream = Some(item);
            params.push(Param::Items);
            continue;
        }
        if is_context(&pt.ty) {
            if context.is_some() {
                errors.on(&pt.ty, "a service method takes at most one `Context`");
            }
            context = Some(i);
            params.push(Param::Context);
            continue;
        }
        let arg = match &*pt.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
            other => {
                errors.on(
                    other,
                    "a service method's arguments are plain names (`bar: f64`): their names \
                     are the client's",
                );
                continue;
            }
        };
        if arg.to_string().starts_with("__") {
            errors.on(
                &arg,
                "argument names starting with `__` are the generated code's",
            );
        }
        if let Some(problem) = unowned(&pt.ty) {
            errors.on(
                &pt.ty,
                format!("argument `{arg}`: {problem}; arguments are decoded into owned values"),
            );
        }
        args.push((arg.clone(), (*pt.ty).clone()));
        params.push(Param::Arg(arg));
    }
    Params {
        context,
        stream,
        args,
        params,
    }
}

/// What a method returns: a `Result`'s `Ok` type, or the value; refuses borrowed types.
fn read_output(sig: &Signature, name: &Ident, errors: &mut Errors) -> Output {
    match &sig.output {
        ReturnType::Default => Output::Value(syn::parse_quote!(())),
        ReturnType::Type(_, ty) => {
            if let Some(problem) = unowned(ty) {
                errors.on(
                    ty,
                    format!(
                        "the result of `{name}`: {problem}; results are decoded into owned values"
                    ),
                );
            }
            match result_ok(ty) {
                Some(ok) => Output::Result(ok),
                None => Output::Value((**ty).clone()),
            }
        }
    }
}

/// Takes `#[query]`, `#[idempotent]`, `#[idempotent(conflate)]`, `#[non_repeatable]` off a
/// method: its semantics (`None`: undeclared) and whether it conflates.
fn take_semantics(attrs: &mut Vec<Attribute>, errors: &mut Errors) -> (Option<Semantics>, bool) {
    let mut semantics: Option<(Semantics, Span)> = None;
    let mut conflate = false;
    let mut kept = Vec::with_capacity(attrs.len());
    for attr in attrs.drain(..) {
        let which = if attr.path().is_ident("query") {
            Semantics::Query
        } else if attr.path().is_ident("idempotent") {
            Semantics::Idempotent
        } else if attr.path().is_ident("non_repeatable") {
            Semantics::NonRepeatable
        } else if attr.path().is_ident("conflate") {
            errors.on(
                &attr,
                "`conflate` is written `#[idempotent(conflate)]`: only an idempotent command may \
                 replace a waiting call, since its newest call leaves the state all of them would",
            );
            continue;
        } else {
            kept.push(attr);
            continue;
        };
        let span = attr.path().span();
        if semantics.is_some() {
            errors.at(
                span,
                "a method declares one semantics: `#[query]`, `#[idempotent]` or `#[non_repeatable]`",
            );
        }
        semantics = Some((which, span));
        if let syn::Meta::List(list) = &attr.meta {
            let parsed = list.parse_nested_meta(|meta| {
                if meta.path.is_ident("conflate") {
                    if which != Semantics::Idempotent {
                        return Err(meta.error(format!(
                            "`conflate` is for idempotent commands only (`#[idempotent(conflate)]`): {}",
                            conflate_refusal(which)
                        )));
                    }
                    conflate = true;
                    Ok(())
                } else {
                    Err(meta.error(if which == Semantics::Idempotent {
                        "`#[idempotent]` takes only `conflate`"
                    } else {
                        "this attribute takes no arguments"
                    }))
                }
            });
            if let Err(e) = parsed {
                errors.push(e);
            }
        } else if let syn::Meta::NameValue(nv) = &attr.meta {
            errors.on(nv, "this attribute takes no value");
        }
    }
    *attrs = kept;
    (semantics.map(|(s, _)| s), conflate)
}

/// Why dropping a waiting call of these semantics would be wrong.
fn conflate_refusal(semantics: Semantics) -> &'static str {
    match semantics {
        Semantics::Query => {
            "a replaced query's caller would lose a reading it asked for, with no state to converge on"
        }
        Semantics::NonRepeatable => {
            "dropping a queued non-repeatable command would skip work a caller was promised"
        }
        Semantics::Idempotent => "",
    }
}

/// True for the request context argument: a path type whose last segment is `Context`.
fn is_context(ty: &Type) -> bool {
    match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "Context" && s.arguments.is_empty()),
        _ => false,
    }
}

/// `T` of an `Items<T>` argument (the item sink of a streaming method), if it is one.
fn items_type(ty: &Type) -> Option<Type> {
    let Type::Path(p) = ty else {
        return None;
    };
    let last = p.path.segments.last()?;
    if last.ident != "Items" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>().as_slice() {
        [GenericArgument::Type(t)] => Some(t.clone()),
        _ => None,
    }
}

/// Why `ty` cannot travel as an owned, decoded value, if it cannot.
fn unowned(ty: &Type) -> Option<&'static str> {
    match ty {
        Type::Reference(_) => Some("a reference cannot be decoded (take `String`, not `&str`)"),
        Type::ImplTrait(_) => Some("`impl Trait` has no wire form"),
        Type::TraitObject(_) => Some("a trait object has no wire form"),
        Type::Ptr(_) => Some("a pointer has no wire form"),
        Type::Paren(p) => unowned(&p.elem),
        Type::Group(g) => unowned(&g.elem),
        _ => None,
    }
}

/// `T` of a `Result<T, E>` return type, if it is one.
fn result_ok(ty: &Type) -> Option<Type> {
    let Type::Path(p) = ty else {
        return None;
    };
    let last = p.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let types: Vec<&Type> = args
        .args
        .iter()
        .filter_map(|a| match a {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect();
    match types.as_slice() {
        [ok, _err] => Some((*ok).clone()),
        _ => None,
    }
}
