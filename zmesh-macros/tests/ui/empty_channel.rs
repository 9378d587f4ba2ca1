#[zmesh_macros::service(channel = "")]
trait Pump {
    #[query]
    async fn pressure(&self) -> f64;
}

fn main() {}
