#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    async fn pressure(&self) -> f64 {
        1.0
    }
}

fn main() {}
