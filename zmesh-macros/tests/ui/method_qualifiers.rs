#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    const async fn pressure(&self) -> f64;
    #[query]
    async unsafe fn level(&self) -> f64;
    #[query]
    async extern "C" fn flow(&self) -> f64;
}

fn main() {}
