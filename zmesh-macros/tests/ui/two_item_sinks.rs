#[zmesh::service(channel = "pump")]
trait Pump {
    #[query]
    async fn watch(&self, a: zmesh::typed::Items<f64>, b: zmesh::typed::Items<f64>);
}

fn main() {}
