#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    async fn watch(&self, a: Items<f64>, b: Items<f64>);
}

fn main() {}
