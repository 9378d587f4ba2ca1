#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    async fn contract(&self) -> String;
    #[idempotent]
    async fn into_service(&self) -> bool;
}

fn main() {}
