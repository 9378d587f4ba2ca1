//! The code a checked [`Service`] becomes: the trait, rewritten so that implementations
//! return `Send` futures and gain `into_service` and `contract`; `impl Trait for Arc<T>`;
//! and the typed client.
//!
//! Every generated item names `::zmesh` paths only (the runtime's builder API, `Node`, and
//! `zmesh::typed`, which holds what the generated code calls).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{parse_quote, ReturnType, TraitItem};

use crate::model::{Execution, Method, Output, Param, Semantics, Service};

/// The whole expansion.
pub(crate) fn expand(service: &Service) -> TokenStream {
    let client = client(service);
    let item = rewrite_trait(service);
    let shared = arc_impl(&item);
    quote! {
        #item
        #shared
        #client
    }
}

/// `impl Trait for Arc<T>` for every implementation `T`, calling through: an implementation
/// shared with the rest of the program (`Arc::new(plant)`, one clone kept) is exposed as it is.
fn arc_impl(item: &syn::ItemTrait) -> TokenStream {
    let name = &item.ident;
    let methods = item.items.iter().filter_map(|i| match i {
        TraitItem::Fn(f) if f.default.is_none() => Some(f),
        _ => None,
    });
    let methods = methods.map(|f| {
        let mut sig = f.sig.clone();
        let mut args = Vec::new();
        for (i, input) in sig.inputs.iter_mut().enumerate() {
            if let syn::FnArg::Typed(pt) = input {
                let arg = format_ident!("__a{}", i);
                *pt.pat = parse_quote!(#arg);
                args.push(arg);
            }
        }
        let method = &sig.ident;
        quote! {
            #sig {
                <__T as #name>::#method(&**self, #(#args),*)
            }
        }
    });
    quote! {
        impl<__T: #name> #name for ::std::sync::Arc<__T> {
            #(#methods)*
        }
    }
}

/// How a method's semantics are written in the contract and the runtime's builder API.
fn semantics_path(s: Option<Semantics>) -> TokenStream {
    match s {
        Some(Semantics::Query) => quote!(::core::option::Option::Some(
            ::zmesh::runtime::service::Semantics::Query
        )),
        Some(Semantics::Idempotent) => quote!(::core::option::Option::Some(
            ::zmesh::runtime::service::Semantics::IdempotentCommand
        )),
        Some(Semantics::NonRepeatable) => quote!(::core::option::Option::Some(
            ::zmesh::runtime::service::Semantics::NonRepeatableCommand
        )),
        None => quote!(::core::option::Option::None),
    }
}

/// Words for the generated docs.
fn semantics_words(s: Option<Semantics>, conflate: bool) -> &'static str {
    match (s, conflate) {
        (Some(Semantics::Query), _) => "a query (repeating it costs a round trip)",
        (Some(Semantics::Idempotent), false) => {
            "an idempotent command (repeating it leaves the same state as doing it once)"
        }
        (Some(Semantics::Idempotent), true) => {
            "an idempotent command (repeating it leaves the same state as doing it once) that \
             conflates: a newer call replaces one still waiting, whose caller is answered \
             `Superseded`"
        }
        (Some(Semantics::NonRepeatable), _) => {
            "a non-repeatable command (repeating it does it again): retry a lost call with the \
             same idempotency key"
        }
        (None, _) => "undeclared (never guessed to be safe to repeat)",
    }
}

/// The trait as the user wrote it, each `async fn` turned into a `fn` returning a `Send`
/// future, with `Send + Sync + 'static` bounds and the provided `into_service` / `contract`.
fn rewrite_trait(service: &Service) -> syn::ItemTrait {
    let mut item = service.item.clone();
    let client = client_name(service);
    let channel = &service.channel;
    if item.colon_token.is_none() {
        item.colon_token = Some(Default::default());
    }
    item.supertraits.push(parse_quote!(::core::marker::Send));
    item.supertraits.push(parse_quote!(::core::marker::Sync));
    item.supertraits.push(parse_quote!('static));
    for trait_item in &mut item.items {
        if let TraitItem::Fn(f) = trait_item {
            f.sig.asyncness = None;
            let out: syn::Type = match &f.sig.output {
                ReturnType::Default => parse_quote!(()),
                ReturnType::Type(_, t) => (**t).clone(),
            };
            f.sig.output = parse_quote!(
                -> impl ::core::future::Future<Output = #out> + ::core::marker::Send
            );
        }
    }
    let arms = service.methods.iter().enumerate().map(|(i, m)| {
        let handler = handler(&service.item.ident, m);
        match m.stream {
            Some(_) => quote!(#i => service.stream_method(method, #handler),),
            None => quote!(#i => service.method(method, #handler),),
        }
    });
    let into_service_doc = format!(
        "Exposes this implementation as the `{channel}` service: hand the result to \
         `Node::expose` or `NodeBuilder::expose`. Each call decodes its arguments (a mismatch \
         answers `InvalidParams`, did not run), runs the method on this one shared value, and \
         encodes its result (one that does not encode answers `Exception`: it ran); the \
         contract is [`{client}::contract`]."
    );
    let contract_doc = format!(
        "The contract of the `{channel}` service, equal to what `Node::describe` reports for \
         it once exposed (also [`{client}::contract`], which needs no implementation)."
    );
    item.items.push(parse_quote! {
        #[doc = #into_service_doc]
        fn into_service(self) -> ::zmesh::runtime::service::Service
        where
            Self: ::core::marker::Sized,
        {
            let __this = ::std::sync::Arc::new(self);
            #client::__declare(|service, method, index, _| match index {
                #(#arms)*
                _ => service,
            })
        }
    });
    item.items.push(parse_quote! {
        #[doc = #contract_doc]
        fn contract() -> ::zmesh::proto::contract::ServiceContract
        where
            Self: ::core::marker::Sized,
        {
            #client::contract()
        }
    });
    item
}

/// The handler of method `m`, a closure over `__this: Arc<Self>` (names that start with `__`
/// cannot clash with an argument's: the macro refuses those).
fn handler(trait_name: &syn::Ident, m: &Method) -> TokenStream {
    let name = &m.name;
    let decode = decode_args(m);
    let context = m
        .context
        .map(|_| quote!(let __ctx = ::zmesh::typed::Context::__from_request(&__req);));
    let params = m.params.iter().map(|p| match p {
        Param::Context => quote!(__ctx),
        Param::Items => quote!(__items),
        Param::Arg(a) => quote!(#a),
    });
    let (sink, items) = match &m.stream {
        Some(_) => (
            quote!(, __sink: ::zmesh::runtime::calls::ItemSink),
            quote!(let __items = ::zmesh::typed::Items::__new(__sink);),
        ),
        None => (quote!(), quote!()),
    };
    let reply = match &m.output {
        Output::Value(_) => quote!(::zmesh::typed::__private::reply(__out)),
        Output::Result(_) => quote!(::zmesh::typed::__private::reply_result(__out)),
    };
    quote! {{
        let __this = ::std::sync::Arc::clone(&__this);
        move |__req: ::zmesh::runtime::calls::Request #sink| {
            let __this = ::std::sync::Arc::clone(&__this);
            async move {
                #items
                #context
                #decode
                let __out = <Self as #trait_name>::#name(&*__this, #(#params),*).await;
                #reply
            }
        }
    }}
}

/// Decodes the arguments of `m` from `__req`: none, the one argument itself, or a tuple.
fn decode_args(m: &Method) -> TokenStream {
    match m.args.as_slice() {
        [] => quote!(),
        [(a, t)] => quote!(let #a: #t = __req.args()?;),
        many => {
            let names = many.iter().map(|(a, _)| a);
            let types = many.iter().map(|(_, t)| t);
            quote!(let (#(#names,)*): (#(#types,)*) = __req.args()?;)
        }
    }
}

/// The encoded arguments of a client call of `m`.
fn encode_args(m: &Method) -> TokenStream {
    match m.args.as_slice() {
        [] => quote!(::zmesh::typed::__private::encode_args(&())),
        [(a, _)] => quote!(::zmesh::typed::__private::encode_args(&#a)),
        many => {
            let names = many.iter().map(|(a, _)| a);
            quote!(::zmesh::typed::__private::encode_args(&(#(#names,)*)))
        }
    }
}

fn client_name(service: &Service) -> syn::Ident {
    format_ident!("{}Client", service.item.ident)
}

/// The key function of `execution = keyed(key)`: per method, the key argument decoded alone.
fn key_fn(service: &Service, key: &syn::Ident) -> TokenStream {
    let arms = service.methods.iter().map(|m| {
        let name = m.name.to_string();
        let pos = m.args.iter().position(|(a, _)| a == key).unwrap_or(0);
        let decode = if m.args.len() == 1 {
            let t = &m.args[0].1;
            quote!(let __key: #t = __req.args()?;)
        } else {
            let pats = (0..m.args.len()).map(|i| if i == pos { quote!(__key) } else { quote!(_) });
            let types = m.args.iter().enumerate().map(|(i, (_, t))| {
                if i == pos {
                    quote!(#t)
                } else {
                    quote!(::zmesh::typed::__private::IgnoredAny)
                }
            });
            quote!(let (#(#pats,)*): (#(#types,)*) = __req.args()?;)
        };
        quote!(#name => { #decode ::zmesh::typed::__private::key_of(&__key) })
    });
    quote! {
        ::zmesh::runtime::service::Execution::keyed(
            |__req: &::zmesh::runtime::calls::Request| match __req.method.as_str() {
                #(#arms)*
                _ => ::core::result::Result::Ok(::std::string::String::new()),
            },
        )
    }
}

/// The typed client and the service's declaration (shared by the contract and the server).
fn client(service: &Service) -> TokenStream {
    let vis = &service.item.vis;
    let trait_name = &service.item.ident;
    let client = client_name(service);
    let channel = &service.channel;
    let version = &service.version;
    let mailbox = service
        .mailbox
        .map(|n| quote!(let service = service.mailbox(#n);));
    let execution = service.execution.as_ref().map(|e| {
        let e = match e {
            Execution::Serial => quote!(::zmesh::runtime::service::Execution::Serial),
            Execution::Parallel => quote!(::zmesh::runtime::service::Execution::Parallel),
            Execution::Keyed(key) => key_fn(service, key),
        };
        quote!(let service = service.execution(#e);)
    });
    let declare = service.methods.iter().enumerate().map(|(i, m)| {
        let name = m.name.to_string();
        let semantics = semantics_path(m.semantics);
        let conflate = m.conflate.then(|| quote!(.conflate()));
        let stream = m.stream.is_some();
        quote! {
            let service = add(
                service,
                ::zmesh::runtime::service::Method::new(#name, #semantics) #conflate,
                #i,
                #stream,
            );
        }
    });
    let methods = service.methods.iter().map(client_method);
    let client_doc = format!(
        "The typed client of the `{channel}` service (trait [`{trait_name}`]): one method per \
         service method, taking its arguments and returning a [`zmesh::typed::Call`] that, \
         awaited, gives its result. Each call pins the semantics it was built with: a server \
         whose method became more dangerous to repeat answers `IncompatibleVersion` (did not \
         run) instead of running it. Cheap to clone."
    );
    let channel_doc = format!("The channel of this service: `{channel:?}`.");
    quote! {
        #[doc = #client_doc]
        #[derive(::core::clone::Clone)]
        #vis struct #client {
            node: ::zmesh::runtime::Node,
            peer: ::core::option::Option<::std::string::String>,
        }

        impl ::core::fmt::Debug for #client {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!(#client))
                    .field("channel", &#channel)
                    .field("peer", &self.peer)
                    .finish()
            }
        }

        impl #client {
            #[doc = #channel_doc]
            pub const CHANNEL: &'static str = #channel;

            /// A client calling through `node`: each call goes to a ready server of the
            /// channel (a RouteMesh peer with a Server membership of it, or a ClientServer
            /// server configured for it), as `Node::call` routes.
            pub fn new(node: &::zmesh::runtime::Node) -> Self {
                Self {
                    node: ::core::clone::Clone::clone(node),
                    peer: ::core::option::Option::None,
                }
            }

            /// This client, calling RouteMesh peer `rid` only (`CallOptions::peer`).
            pub fn to_peer(mut self, rid: impl ::core::convert::Into<::std::string::String>) -> Self {
                self.peer = ::core::option::Option::Some(rid.into());
                self
            }

            /// The node this client calls through.
            pub fn node(&self) -> &::zmesh::runtime::Node {
                &self.node
            }

            /// Resolves once a call of this client can be routed: a server of the channel
            /// (or the peer of [`Self::to_peer`]) is ready. No timeout: cancel it by dropping
            /// it. Fails only when the node stops.
            pub async fn ready(&self) -> ::core::result::Result<(), ::zmesh::runtime::ReadyError> {
                let target = match &self.peer {
                    ::core::option::Option::Some(rid) => ::zmesh::runtime::Target::peer(rid.as_str()),
                    ::core::option::Option::None => ::zmesh::runtime::Target::server(#channel),
                };
                self.node.ready(target).await
            }

            /// The contract of the service, as `Node::describe` reports it once exposed.
            pub fn contract() -> ::zmesh::proto::contract::ServiceContract {
                Self::__declare(|service, method, _, stream| {
                    if stream {
                        service.stream_method(method, ::zmesh::typed::__private::not_exposed_stream)
                    } else {
                        service.method(method, ::zmesh::typed::__private::not_exposed)
                    }
                })
                .contract()
            }

            /// The service's declaration: `add` attaches the handler of method number `index`
            /// (a stream handler when the last argument is true).
            #[doc(hidden)]
            pub fn __declare(
                mut add: impl ::core::ops::FnMut(
                    ::zmesh::runtime::service::Service,
                    ::zmesh::runtime::service::Method,
                    usize,
                    bool,
                ) -> ::zmesh::runtime::service::Service,
            ) -> ::zmesh::runtime::service::Service {
                let service = ::zmesh::runtime::service::Service::new(#channel).version(#version);
                #mailbox
                #execution
                #(#declare)*
                service
            }

            #(#methods)*
        }
    }
}

/// One method of the client.
fn client_method(m: &Method) -> TokenStream {
    let name = &m.name;
    let method = m.name.to_string();
    let docs = &m.docs;
    let ok = m.output.ok_type();
    let semantics = semantics_path(m.semantics);
    let args = m.args.iter().map(|(a, t)| quote!(#a: #t));
    let encode = encode_args(m);
    let answer = if m.stream.is_some() {
        " Its answer streams: awaiting the call gives the stream of its items and result."
    } else {
        ""
    };
    let words = format!(
        "`{method}` is {}; the call pins that (see the type's docs). Add \
         `.idempotency_key(..)`, `.ttl(..)` before awaiting it.{answer}",
        semantics_words(m.semantics, m.conflate)
    );
    let separator = (!docs.is_empty()).then(|| quote!(#[doc = ""]));
    let (returns, make) = match &m.stream {
        Some(item) => (
            quote!(::zmesh::typed::StreamCall<#item, #ok>),
            quote!(::zmesh::typed::StreamCall::__new),
        ),
        None => (
            quote!(::zmesh::typed::Call<#ok>),
            quote!(::zmesh::typed::Call::__new),
        ),
    };
    quote! {
        #(#docs)*
        #separator
        #[doc = #words]
        pub fn #name(&self, #(#args),*) -> #returns {
            #make(
                &self.node,
                Self::CHANNEL,
                #method,
                #semantics,
                ::core::clone::Clone::clone(&self.peer),
                #encode,
            )
        }
    }
}
