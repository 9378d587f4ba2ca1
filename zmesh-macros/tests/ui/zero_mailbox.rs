#[zmesh_macros::service(channel = "pump", mailbox = 0)]
trait Pump {
    #[query]
    async fn pressure(&self) -> f64;
}

fn main() {}
