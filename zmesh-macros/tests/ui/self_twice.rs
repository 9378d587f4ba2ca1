#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    async fn pressure(&self, self) -> f64;
}

fn main() {}
