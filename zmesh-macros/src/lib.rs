//! The `#[zmesh::service]` attribute. Use it through the `zmesh` crate, which re-exports it
//! and documents it (`zmesh::service`): the generated code names items of `::zmesh`.
//!
//! # Layout
//!
//! ```text
//!   #[service(..)] trait Pump { .. }
//!        |  model::Service::parse: the attribute's keys, each method's semantics attribute,
//!        |  its arguments and result; every rejected input is a syn::Error with a span
//!        v
//!   expand::expand: the trait (async fn -> impl Future + Send, into_service, contract),
//!   impl Pump for Arc<T>, PumpClient (typed calls pinned to the declared semantics, ready)
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use proc_macro::TokenStream;

mod expand;
mod model;

/// Turns a trait into a typed zmesh service.
#[proc_macro_attribute]
pub fn service(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = proc_macro2::TokenStream::from(attr);
    let item = proc_macro2::TokenStream::from(item);
    match model::Service::parse(attr, item) {
        Ok(service) => expand::expand(&service).into(),
        Err(e) => e.to_compile_error().into(),
    }
}
