#[zmesh_macros::service(channel = "pump")]
unsafe trait Pump {
    #[query]
    async fn pressure(&self) -> f64;
}

fn main() {}
